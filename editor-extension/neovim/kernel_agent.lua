-- Kernel Agent in Neovim 0.11+ (vim.lsp.config / vim.lsp.enable).
--
-- Put this file in your config (e.g. ~/.config/nvim/lua/kernel_agent.lua) and
-- `require("kernel_agent")` from init.lua, or paste it there. It starts `kernel-agent serve`
-- for Python files next to your usual Python server, refreshes the code lenses, and maps:
--
--   <leader>ko   optimize the target under the cursor (the code action menu)
--   <leader>kl   run the code lens on this line (Optimize · Profile · Accept · Reject · Show diff)
--   <leader>ka   accept the waiting rewrite       (:KernelAgentAccept)
--   <leader>kr   reject the waiting rewrite       (:KernelAgentReject)
--   <leader>kd   show the waiting rewrite's diff  (:KernelAgentDiff)
--   <leader>kj   list running jobs                (:KernelAgentJobs)
--   <leader>kc   cancel the job on this file      (:KernelAgentCancel)
--
-- With several rewrites waiting in one file, the commands ask which target (vim.ui.select).
-- API keys: start Neovim with ANTHROPIC_API_KEY / OPENAI_API_KEY in its environment (the
-- server reads them from there); never put them in `settings`.

local cmd = { "kernel-agent", "serve" }
-- or a specific environment: cmd = { "/path/to/.venv/bin/python", "-m", "server" }

vim.lsp.config("kernel_agent", {
  cmd = cmd,
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", ".git" },
  -- initializationOptions and workspace/configuration (section "kernelAgent"): the keys of
  -- server/README.md, nested as here or flat.
  init_options = {
    device = "cpu",
    search = { maxEvals = 40 },
  },
  settings = {
    kernelAgent = {
      rewriteMode = "replace", -- or "alongside"
      profileOnSave = false,
      llm = { backend = "offline" }, -- "anthropic" / "openai" (+ model, baseUrl)
    },
  },
})
vim.lsp.enable("kernel_agent")

local function client_for(bufnr)
  return vim.lsp.get_clients({ name = "kernel_agent", bufnr = bufnr })[1]
end

--- workspace/executeCommand on the Kernel Agent server.
local function execute(bufnr, command, argument, on_result)
  local client = client_for(bufnr)
  if not client then
    vim.notify("Kernel Agent: the server is not attached to this buffer", vim.log.levels.WARN)
    return
  end
  client:request("workspace/executeCommand", { command = command, arguments = { argument } },
    function(err, result)
      if err then
        vim.notify("Kernel Agent: " .. (err.message or tostring(err)), vim.log.levels.ERROR)
      elseif on_result then
        on_result(result)
      end
    end, bufnr)
end

--- Run `command` ({uri, target}) on the rewrite waiting in this buffer (asks when several).
local function on_pending(command)
  return function()
    local bufnr = vim.api.nvim_get_current_buf()
    local uri = vim.uri_from_bufnr(bufnr)
    execute(bufnr, "kernelAgent.pendingRewrite", { uri = uri }, function(result)
      local rewrites = (result or {}).rewrites or {}
      if #rewrites == 0 then
        vim.notify("Kernel Agent: no rewrite is waiting in this file")
        return
      end
      local function run(choice)
        if choice then
          execute(bufnr, command, { uri = uri, target = choice.target })
        end
      end
      if #rewrites == 1 then
        run(rewrites[1])
      else
        vim.ui.select(rewrites, {
          prompt = "Kernel Agent: which target?",
          format_item = function(r) return r.target .. " (" .. r.summary .. ")" end,
        }, run)
      end
    end)
  end
end

local function jobs()
  execute(0, "kernelAgent.jobs", {}, function(list)
    if not list or #list == 0 then
      vim.notify("Kernel Agent: no job is running")
      return
    end
    local lines = {}
    for _, job in ipairs(list) do
      table.insert(lines, string.format("%s %s: %d%% %s", job.kind, job.target, job.percent or 0,
        job.message or ""))
    end
    vim.notify("Kernel Agent jobs:\n" .. table.concat(lines, "\n"))
  end)
end

local function cancel()
  local bufnr = vim.api.nvim_get_current_buf()
  local uri = vim.uri_from_bufnr(bufnr)
  execute(bufnr, "kernelAgent.jobs", { uri = uri }, function(list)
    for _, job in ipairs(list or {}) do
      execute(bufnr, "kernelAgent.cancel", { jobId = job.jobId })
    end
    if not list or #list == 0 then
      vim.notify("Kernel Agent: no job is running on this file")
    end
  end)
end

vim.api.nvim_create_user_command("KernelAgentAccept", on_pending("kernelAgent.accept"), {})
vim.api.nvim_create_user_command("KernelAgentReject", on_pending("kernelAgent.reject"), {})
vim.api.nvim_create_user_command("KernelAgentDiff", on_pending("kernelAgent.showDiff"), {})
vim.api.nvim_create_user_command("KernelAgentJobs", jobs, {})
vim.api.nvim_create_user_command("KernelAgentCancel", cancel, {})

vim.api.nvim_create_autocmd("LspAttach", {
  group = vim.api.nvim_create_augroup("kernel_agent", { clear = true }),
  callback = function(event)
    local client = vim.lsp.get_client_by_id(event.data.client_id)
    if not client or client.name ~= "kernel_agent" then
      return
    end
    local buf = event.buf
    local function map(lhs, rhs, desc)
      vim.keymap.set("n", lhs, rhs, { buffer = buf, desc = "Kernel Agent: " .. desc })
    end
    map("<leader>ko", vim.lsp.buf.code_action, "optimize / profile (code actions)")
    map("<leader>kl", vim.lsp.codelens.run, "run the code lens")
    map("<leader>ka", "<cmd>KernelAgentAccept<cr>", "accept rewrite")
    map("<leader>kr", "<cmd>KernelAgentReject<cr>", "reject rewrite")
    map("<leader>kd", "<cmd>KernelAgentDiff<cr>", "show rewrite diff")
    map("<leader>kj", "<cmd>KernelAgentJobs<cr>", "list jobs")
    map("<leader>kc", "<cmd>KernelAgentCancel<cr>", "cancel job")
    -- code lenses are not refreshed by default
    vim.lsp.codelens.refresh({ bufnr = buf })
    vim.api.nvim_create_autocmd({ "BufEnter", "InsertLeave", "BufWritePost" }, {
      buffer = buf,
      group = vim.api.nvim_create_augroup("kernel_agent_lens_" .. buf, { clear = true }),
      callback = function() vim.lsp.codelens.refresh({ bufnr = buf }) end,
    })
  end,
})
