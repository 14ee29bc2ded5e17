-- A real Neovim (0.11+) as the language server's client, driven headless by tests/e2e/test_neovim.py:
--
--   nvim --headless -u NONE -i NONE -l tests/nvim/optimize_accept.lua
--
-- It opens KA_FILE (a copy of a KernelBench problem), starts `python -m server` with
-- vim.lsp.start, lists the code actions at the Model class, resolves and runs "Optimize kernel
-- `Model`" (offline backend), follows the job through $/progress (LspProgress), dismisses the
-- server's Accept/Reject/Show diff prompt (vim.ui.select answers nil, as a user pressing
-- Escape), then accepts through the "Accept" code lens's command; Neovim's own
-- workspace/applyEdit handler edits the buffer. A second file (KA_HINT_FILE) checks that
-- pushed diagnostics (static hints) arrive. Everything seen goes to KA_OUT as JSON; the
-- pytest side makes the assertions. Neovim's own handlers are kept except for showMessage and
-- logMessage, which are recorded instead of printed.
--
-- Environment: KA_PYTHON, KA_ROOT (the repository), KA_FILE, KA_HINT_FILE, KA_MEMORY (a
-- memory file in a temporary folder), KA_OUT, KA_JOB_TIMEOUT_S (default 240), KA_MAX_EVALS.

local out = {
  errors = {},
  steps = {},
  messages = {},
  logs = {},
  prompts = {},
  progress = {},
}

local function env(name, default)
  local value = os.getenv(name)
  if value == nil or value == '' then
    if default == nil then
      error('environment variable ' .. name .. ' is not set')
    end
    return default
  end
  return value
end

local function now()
  return vim.uv.hrtime() / 1e9
end

local started_at = now()

local function step(name, extra)
  local entry = { name = name, t = now() - started_at }
  if extra ~= nil then
    entry.detail = extra
  end
  table.insert(out.steps, entry)
end

local function fail(message)
  error({ ka = message }, 0)
end

local function write_out()
  local path = os.getenv('KA_OUT')
  if not path then
    return
  end
  local file = assert(io.open(path, 'w'))
  file:write(vim.json.encode(out))
  file:close()
end

local function buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n')
end

-- What a user's UI would show: recorded, and answered "dismissed" so nothing blocks.
vim.ui.select = function(items, opts, on_choice)
  local titles = {}
  for _, item in ipairs(items) do
    table.insert(titles, type(item) == 'table' and item.title or tostring(item))
  end
  table.insert(out.prompts, { prompt = opts and opts.prompt or '', items = titles })
  on_choice(nil)
end

local function main()
  local python = env('KA_PYTHON')
  local root = env('KA_ROOT')
  local file = env('KA_FILE')
  local hint_file = env('KA_HINT_FILE')
  local memory = env('KA_MEMORY')
  local job_timeout_ms = tonumber(env('KA_JOB_TIMEOUT_S', '240')) * 1000
  local max_evals = tonumber(env('KA_MAX_EVALS', '2'))
  out.nvim_version = tostring(vim.version())

  vim.cmd.edit(vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local original = buffer_text(bufnr)

  vim.api.nvim_create_autocmd('LspProgress', {
    callback = function(args)
      local params = args.data.params
      local value = params.value or {}
      table.insert(out.progress, {
        token = params.token,
        kind = value.kind,
        title = value.title,
        message = value.message,
        percentage = value.percentage,
        t = now() - started_at,
      })
    end,
  })

  local client_id = vim.lsp.start({
    name = 'kernel-agent',
    cmd = { python, '-m', 'server' },
    cmd_cwd = root,
    root_dir = vim.fs.dirname(file),
    init_options = {
      kernelAgent = {
        search = {
          threads = 1,
          timingBudget = 0.3,
          maxEvals = max_evals,
          profile = false,
        },
        memory = { path = memory },
      },
    },
    -- What a Neovim user writes in their config; the server asks for it (workspace/configuration).
    settings = { kernelAgent = { rewriteMode = 'replace' } },
    handlers = {
      ['window/showMessage'] = function(_, params)
        table.insert(out.messages, { type = params.type, message = params.message })
        return vim.NIL
      end,
      ['window/logMessage'] = function(_, params)
        table.insert(out.logs, { type = params.type, message = params.message })
        return vim.NIL
      end,
    },
  }, { bufnr = bufnr })
  if not client_id then
    fail('vim.lsp.start returned no client')
  end
  local client = assert(vim.lsp.get_client_by_id(client_id))

  if
    not vim.wait(30000, function()
      return client.initialized == true or client:is_stopped()
    end, 50)
  then
    fail('the server did not initialize within 30 s')
  end
  if client:is_stopped() then
    fail('the server exited during initialize')
  end
  step('initialized', { offset_encoding = client.offset_encoding })
  out.server_capabilities = {
    codeActionProvider = client.server_capabilities.codeActionProvider,
    codeLensProvider = client.server_capabilities.codeLensProvider ~= nil,
    hoverProvider = client.server_capabilities.hoverProvider,
    executeCommandProvider = client.server_capabilities.executeCommandProvider,
  }
  local encoding = client.offset_encoding
  local uri = vim.uri_from_bufnr(bufnr)

  -- The class line of the first target: "class Model(" (1-based for the cursor).
  local class_line
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if line:match('^class Model%(') then
      class_line = i
      break
    end
  end
  if not class_line then
    fail('no `class Model(` in ' .. file)
  end
  vim.api.nvim_win_set_cursor(0, { class_line, 6 })

  local function code_actions()
    local params = vim.lsp.util.make_range_params(0, encoding)
    params.context = { diagnostics = {}, triggerKind = 1 }
    local responses, err = vim.lsp.buf_request_sync(bufnr, 'textDocument/codeAction', params, 10000)
    if err then
      fail('textDocument/codeAction: ' .. tostring(err))
    end
    local response = responses and responses[client_id]
    if not response then
      fail('textDocument/codeAction: no answer within 10 s')
    end
    if response.err then
      fail('textDocument/codeAction: ' .. vim.inspect(response.err))
    end
    return response.result or {}
  end

  local function titles_of(actions)
    local titles = {}
    for _, a in ipairs(actions) do
      table.insert(titles, a.title)
    end
    return titles
  end

  local function code_lenses()
    local response = client:request_sync(
      'textDocument/codeLens',
      { textDocument = { uri = uri } },
      10000,
      bufnr
    )
    if not response then
      fail('textDocument/codeLens: no answer within 10 s')
    end
    if response.err then
      fail('textDocument/codeLens: ' .. vim.inspect(response.err))
    end
    return response.result or {}
  end

  local function hover_at_cursor()
    local params = vim.lsp.util.make_position_params(0, encoding)
    local response = client:request_sync('textDocument/hover', params, 10000, bufnr)
    if not response or response.err then
      fail('textDocument/hover failed: ' .. vim.inspect(response and response.err))
    end
    local result = response.result
    if result == nil or result == vim.NIL then
      return vim.NIL
    end
    local contents = result.contents
    return type(contents) == 'table' and (contents.value or vim.inspect(contents)) or contents
  end

  -- Runs a server command the way Neovim runs a code action's or a lens's command.
  local function run_command(command, timeout_ms)
    local done, answer, failure = false, nil, nil
    client:exec_cmd(command, { bufnr = bufnr }, function(err, result)
      done, answer, failure = true, result, err
    end)
    if
      not vim.wait(timeout_ms, function()
        return done
      end, 20)
    then
      fail(command.command .. ': no answer within ' .. timeout_ms .. ' ms')
    end
    if failure then
      fail(command.command .. ': ' .. vim.inspect(failure))
    end
    return answer
  end

  -- 1. Code actions at the class.
  local actions = code_actions()
  out.actions_before = titles_of(actions)
  step('code actions listed', out.actions_before)
  out.hover_before = hover_at_cursor()

  local optimize
  for _, a in ipairs(actions) do
    if a.title:match('^Optimize kernel') then
      optimize = a
      break
    end
  end
  if not optimize then
    fail('no "Optimize kernel" code action: ' .. vim.inspect(out.actions_before))
  end

  -- 2. Resolve it (Neovim advertises resolveSupport for edit and command), then run it.
  out.optimize_needed_resolve = optimize.command == nil
  if optimize.command == nil then
    local resolved = client:request_sync('codeAction/resolve', optimize, 10000, bufnr)
    if not resolved or resolved.err or not resolved.result then
      fail('codeAction/resolve failed: ' .. vim.inspect(resolved))
    end
    optimize = resolved.result
  end
  local command = optimize.command
  if type(command) ~= 'table' or type(command.command) ~= 'string' then
    fail('the resolved Optimize action carries no command: ' .. vim.inspect(optimize))
  end
  out.optimize_command = command
  local t_start = now()
  out.optimize_answer = run_command(command, 30000)
  step('optimize started', out.optimize_answer)
  if type(out.optimize_answer) ~= 'table' or out.optimize_answer.started ~= true then
    fail('the optimize job did not start: ' .. vim.inspect(out.optimize_answer))
  end
  local token = 'kernel-agent/' .. tostring(out.optimize_answer.jobId)

  -- While it runs: the lens shows progress and code actions still answer.
  out.lenses_while_running = {}
  for _, lens in ipairs(code_lenses()) do
    table.insert(out.lenses_while_running, lens.command and lens.command.title or '?')
  end
  out.actions_while_running = titles_of(code_actions())

  -- 3. Wait for the end of the job's progress, then for the Accept lens.
  local ended = vim.wait(job_timeout_ms, function()
    for _, p in ipairs(out.progress) do
      if p.token == token and p.kind == 'end' then
        return true
      end
    end
    return client:is_stopped()
  end, 100)
  out.job_seconds = now() - t_start
  if client:is_stopped() then
    fail('the server exited while the job ran')
  end
  if not ended then
    fail(string.format('the job did not end within %d s', job_timeout_ms / 1000))
  end
  step('job ended', { seconds = out.job_seconds })

  local accept_lens
  vim.wait(10000, function()
    for _, lens in ipairs(code_lenses()) do
      if lens.command and lens.command.title:match('^Accept') then
        accept_lens = lens
        return true
      end
    end
    return false
  end, 200)
  out.lenses_after = {}
  for _, lens in ipairs(code_lenses()) do
    table.insert(out.lenses_after, lens.command and lens.command.title or '?')
  end
  if not accept_lens then
    fail('no Accept lens after the job: ' .. vim.inspect(out.lenses_after))
  end
  out.actions_pending = titles_of(code_actions())
  out.hover_pending = hover_at_cursor()
  step('rewrite waiting', out.lenses_after)

  -- The "Show diff" lens: the server writes a diff and asks Neovim to show it
  -- (window/showDocument), which opens it in the current window.
  for _, lens in ipairs(code_lenses()) do
    if lens.command and lens.command.title == 'Show diff' then
      out.diff_answer = run_command(lens.command, 30000)
      vim.wait(5000, function()
        return vim.api.nvim_get_current_buf() ~= bufnr
      end, 20)
      local shown = vim.api.nvim_get_current_buf()
      out.diff_buffer_name = vim.api.nvim_buf_get_name(shown)
      out.diff_text = shown ~= bufnr and buffer_text(shown) or vim.NIL
      vim.api.nvim_set_current_buf(bufnr)
      vim.api.nvim_win_set_cursor(0, { class_line, 6 })
      break
    end
  end

  -- 4. Accept through the lens's command; Neovim applies the workspace edit itself.
  local version_before = vim.b[bufnr].changedtick
  out.accept_answer = run_command(accept_lens.command, 30000)
  vim.wait(5000, function()
    return vim.b[bufnr].changedtick ~= version_before
  end, 20)
  out.buffer_changed = buffer_text(bufnr) ~= original
  out.buffer_text = buffer_text(bufnr)
  step('accepted', out.accept_answer)

  -- The server's copy follows Neovim's didChange: the target (moved by the edit) is offered
  -- afresh, with no rewrite pending.
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if line:match('^class Model%(') then
      vim.api.nvim_win_set_cursor(0, { i, 6 })
      out.class_line_after = i
      break
    end
  end
  vim.wait(3000, function()
    local ok, titles = pcall(function()
      return titles_of(code_actions())
    end)
    out.actions_after = ok and titles or { 'error: ' .. tostring(titles) }
    for _, title in ipairs(out.actions_after) do
      if title:match('^Show pending') then
        return false
      end
    end
    return #out.actions_after > 0
  end, 200)

  -- 5. Diagnostics: a second file with a host sync in forward gets Hint-severity hints.
  vim.cmd.edit(vim.fn.fnameescape(hint_file))
  local hint_buf = vim.api.nvim_get_current_buf()
  vim.lsp.buf_attach_client(hint_buf, client_id)
  vim.wait(10000, function()
    return #vim.diagnostic.get(hint_buf) > 0
  end, 50)
  out.hint_diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(hint_buf)) do
    table.insert(out.hint_diagnostics, {
      lnum = d.lnum,
      col = d.col,
      severity = d.severity,
      source = d.source,
      code = d.code,
      message = d.message,
    })
  end
  out.diagnostics_main = #vim.diagnostic.get(bufnr)
  step('diagnostics', #out.hint_diagnostics)

  -- 6. A clean shutdown: the server ends (and ends its workers).
  client:stop()
  out.stopped = vim.wait(15000, function()
    return client:is_stopped()
  end, 50)
  step('stopped', out.stopped)
end

local ok, err = xpcall(main, function(e)
  if type(e) == 'table' and e.ka then
    return e.ka
  end
  return debug.traceback(tostring(e), 2)
end)
if not ok then
  table.insert(out.errors, err)
end
out.seconds = now() - started_at
write_out()
for _, client in ipairs(vim.lsp.get_clients()) do
  client:stop(true)
end
vim.cmd('qall!')
