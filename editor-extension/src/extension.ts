// Kernel Agent for VS Code: starts `kernel-agent serve` (or `<python> -m server`) for Python
// files and adds what a generic LSP client lacks: API keys from SecretStorage, a status bar
// of jobs, notification progress, a side-by-side diff of a waiting rewrite with Accept and
// Reject, and Restricted Mode handling. Lenses, code actions and diagnostics come from the
// server through vscode-languageclient.

import * as cp from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  type ConfigurationParams,
  CancellationToken,
  CloseAction,
  ErrorAction,
  ExecuteCommandRequest,
  LanguageClient,
  type LanguageClientOptions,
  type ServerOptions,
  State,
  WorkDoneProgressCancelNotification,
} from "vscode-languageclient/node";
import {
  type ServerCommand,
  checkCommand,
  chooseServerCommand,
  explainFailure,
} from "./interpreter.ts";
import { type JobInfo, SpeedupStatus, jobLabel, statusText } from "./jobs.ts";
import {
  type RewriteRef,
  SCHEME,
  diffTitle,
  parseRewriteUri,
  parseServerDiffPath,
  rewriteUriParts,
} from "./rewriteUri.ts";
import {
  KEY_BACKENDS,
  type KeyBackend,
  needsRestart,
  redact,
  secretName,
  serverEnvironment,
  serverSettings,
} from "./settings.ts";

const SECTION = "kernelAgent";
const CLIENT_ID = "kernelAgent";
const PROGRESS_PREFIX = "kernel-agent/";
const RESTRICTED =
  "Kernel Agent is disabled in Restricted Mode: optimising and profiling run this workspace's Python code (and the language server runs the configured interpreter). Trust the workspace to enable it.";

type PendingRewrite = {
  uri: string;
  target: string;
  original: string;
  rewritten: string;
  summary: string;
  mode: string;
  stale: string | null;
};

let agent: KernelAgent | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  agent = new KernelAgent(context);
  await agent.activate();
}

export async function deactivate(): Promise<void> {
  await agent?.stop();
  agent = undefined;
}

/** Read-only documents for the two sides of a rewrite's diff. */
class RewriteDocuments implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;

  constructor(private readonly fetch: (ref: RewriteRef) => Promise<PendingRewrite | undefined>) {}

  set(uri: vscode.Uri, text: string): void {
    this.texts.set(uri.toString(), text);
    this.emitter.fire(uri);
  }

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const known = this.texts.get(uri.toString());
    if (known !== undefined) return known;
    const ref = parseRewriteUri(uri);
    if (!ref) return "";
    const rewrite = await this.fetch(ref);
    if (!rewrite) return `# No rewrite of \`${ref.target}\` is waiting any more.\n`;
    return ref.side === "original" ? rewrite.original : rewrite.rewritten;
  }

  dispose(): void {
    this.emitter.dispose();
  }
}

/** The server's `$/progress` as notifications (vscode-languageclient shows it only in the
 * status bar), cancellable: cancelling sends window/workDoneProgress/cancel. */
class NotificationProgress {
  private readonly entries = new Map<
    string,
    {
      progress?: vscode.Progress<{ message?: string; increment?: number }>;
      resolve?: () => void;
      reported: number;
      ended: boolean;
      last?: { message?: string; percentage?: number };
    }
  >();

  constructor(private readonly cancel: (token: string) => void) {}

  get active(): number {
    return this.entries.size;
  }

  handle(token: string, params: { kind: string; title?: string; message?: string; percentage?: number; cancellable?: boolean }): void {
    if (params.kind === "begin") {
      const entry: { progress?: vscode.Progress<{ message?: string; increment?: number }>; resolve?: () => void; reported: number; ended: boolean; last?: { message?: string; percentage?: number } } = {
        reported: 0,
        ended: false,
        last: params,
      };
      this.entries.set(token, entry);
      void vscode.window.withProgress(
        {
          location: vscode.ProgressLocation.Notification,
          title: `Kernel Agent: ${params.title ?? "working"}`,
          cancellable: params.cancellable ?? false,
        },
        (progress, cancellation) =>
          new Promise<void>((resolve) => {
            entry.progress = progress;
            entry.resolve = resolve;
            cancellation.onCancellationRequested(() => this.cancel(token));
            if (entry.ended) return resolve();
            if (entry.last) this.report(entry, entry.last);
          }),
      );
      return;
    }
    const entry = this.entries.get(token);
    if (!entry) return;
    if (params.kind === "report") {
      entry.last = params;
      this.report(entry, params);
    } else if (params.kind === "end") {
      entry.ended = true;
      entry.resolve?.();
      this.entries.delete(token);
    }
  }

  private report(
    entry: { progress?: vscode.Progress<{ message?: string; increment?: number }>; reported: number },
    params: { message?: string; percentage?: number },
  ): void {
    if (!entry.progress) return;
    const percentage = Math.max(0, Math.min(params.percentage ?? entry.reported, 100));
    const increment = Math.max(0, percentage - entry.reported);
    entry.reported += increment;
    entry.progress.report({ message: params.message, increment });
  }

  dispose(): void {
    for (const entry of this.entries.values()) entry.resolve?.();
    this.entries.clear();
  }
}

class KernelAgent {
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;
  private readonly output: vscode.LogOutputChannel;
  private readonly status: vscode.StatusBarItem;
  private readonly documents: RewriteDocuments;
  private readonly progress: NotificationProgress;
  private jobs: JobInfo[] = [];
  /** The last finished search's confirmed result (never a maximum over running bests). */
  private readonly speedups = new SpeedupStatus();
  private pollTimer: ReturnType<typeof setTimeout> | undefined;
  private pollUntil = 0;
  private brokenNotified = false;
  private crashes: number[] = [];
  /** Targets being accepted from the diff editor: their edit needs no second preview. */
  private readonly acceptingFromDiff = new Set<string>();
  private secrets: string[] = [];
  private restarting = false;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel("Kernel Agent", { log: true });
    this.status = vscode.window.createStatusBarItem("kernelAgent.status", vscode.StatusBarAlignment.Left, 50);
    this.status.name = "Kernel Agent";
    this.documents = new RewriteDocuments((ref) => this.fetchRewrite(ref.uri, ref.target));
    this.progress = new NotificationProgress((token) => {
      void this.client?.sendNotification(WorkDoneProgressCancelNotification.type, { token });
    });
  }

  async activate(): Promise<void> {
    const c = this.context;
    const command = (id: string, run: (...args: any[]) => unknown) =>
      c.subscriptions.push(vscode.commands.registerCommand(id, run));
    c.subscriptions.push(
      this.output,
      this.status,
      this.documents,
      this.progress,
      vscode.workspace.registerTextDocumentContentProvider(SCHEME, this.documents),
    );
    command("kernelAgent.restartServer", () => this.restart(true));
    command("kernelAgent.setApiKey", () => this.setApiKey());
    command("kernelAgent.showJobs", () => this.showJobs());
    command("kernelAgent.showRewriteDiff", (arg?: unknown) => this.showDiffCommand(arg));
    command("kernelAgent.acceptRewrite", (arg?: unknown) => this.decide("accept", arg));
    command("kernelAgent.rejectRewrite", (arg?: unknown) => this.decide("reject", arg));
    command("kernelAgent.showOutput", () => this.output.show(true));
    command("kernelAgent.openSetup", () => this.openSetup());

    c.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (!event.affectsConfiguration(SECTION)) return;
        if (needsRestart((s) => event.affectsConfiguration(s))) {
          this.brokenNotified = false;
          void this.restart(false);
        }
        // other keys reach the running server through didChangeConfiguration (middleware)
      }),
      vscode.workspace.onDidGrantWorkspaceTrust(() => void this.start()),
      c.secrets.onDidChange((event) => {
        if (event.key.startsWith("kernelAgent.apiKey.")) void this.restart(false);
      }),
    );
    this.watchPythonExtension();
    this.updateStatus();
    this.status.show();
    await this.start();
  }

  // -- the server process -------------------------------------------------------------

  private async resolveServer(): Promise<ServerCommand | undefined> {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const config = vscode.workspace.getConfiguration(SECTION, folder);
    const setting = config.get<string>("interpreter");
    const python = setting?.trim() ? undefined : await pythonExtensionInterpreter(folder);
    return chooseServerCommand(setting, python, {
      isExecutable,
      pathEnv: process.env.PATH,
      home: os.homedir(),
      workspaceFolder: folder?.fsPath,
      platform: process.platform,
    });
  }

  async start(): Promise<void> {
    if (this.starting) return this.starting;
    this.starting = this.doStart().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async doStart(): Promise<void> {
    if (this.client) return;
    if (!vscode.workspace.isTrusted) {
      this.log(RESTRICTED);
      this.updateStatus();
      return;
    }
    const server = await this.resolveServer();
    const keys = await this.readKeys();
    this.secrets = Object.values(keys).filter((k): k is string => !!k);
    const env = serverEnvironment(process.env, keys);
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const problem = server ? await checkServer(server, env, cwd) : explainFailure(undefined, "");
    if (problem) {
      this.log(`cannot start the language server: ${problem}`);
      this.updateStatus(problem);
      this.notifyBroken(problem);
      return;
    }
    const s = server!;
    const initializationOptions = this.settingsFor(undefined);
    this.log(`starting ${s.command} ${s.args.join(" ")} (interpreter from ${s.source})`);
    this.log(`settings: ${JSON.stringify(initializationOptions)}`);
    const serverOptions: ServerOptions = {
      command: s.command,
      args: s.args,
      options: { env, cwd },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "python" }],
      outputChannel: this.output,
      initializationOptions,
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => this.onClosed(),
      },
      middleware: {
        workspace: {
          configuration: async (params: ConfigurationParams, token, next) => {
            const answer = await next(params, token);
            if (!Array.isArray(answer)) return answer;
            return params.items.map((item, i) =>
              item.section === SECTION ? this.settingsFor(item.scopeUri) : answer[i],
            );
          },
          // the server then asks workspace/configuration, answered above
          didChangeConfiguration: async (_sections, next) => {
            // a change that restarts the server is not sent to the one being stopped
            if (this.restarting || this.client?.state !== State.Running) return;
            return next(undefined);
          },
          handleApplyEdit: (params, next) => {
            const uris = (params.edit.documentChanges ?? []).map((c: any) => c?.textDocument?.uri);
            if (params.edit.changeAnnotations && uris.some((u) => u && [...this.acceptingFromDiff].some((k) => k.startsWith(`${u}\n`)))) {
              // accepted from the diff editor: the user has just reviewed it
              for (const annotation of Object.values(params.edit.changeAnnotations)) {
                annotation.needsConfirmation = false;
              }
            }
            return next(params, CancellationToken.None);
          },
        },
        executeCommand: async (command, args, next) => {
          if (command === "kernelAgent.showDiff" && isRef(args[0])) {
            return this.showDiff(args[0].uri, args[0].target);
          }
          if (command === "kernelAgent.optimize" || command === "kernelAgent.profile") {
            this.pollSoon(15_000);
          }
          const result = await next(command, args);
          if (command === "kernelAgent.cancel") this.pollSoon(5_000);
          return result;
        },
        handleWorkDoneProgress: (token, params, next) => {
          if (typeof token === "string" && token.startsWith(PROGRESS_PREFIX)) {
            this.progress.handle(token, params);
            this.speedups.progress(token, params);
            this.pollSoon(params.kind === "end" ? 3_000 : 10_000);
            if (params.kind === "end") next(token, params); // let the client drop its handler
            return;
          }
          next(token, params);
        },
        window: {
          showDocument: async (params, token, next) => {
            // the server's own "Show diff" (after a job ends) opens a unified diff file:
            // show the side-by-side diff instead when the rewrite is known
            const parsed = parseServerDiffPath(vscode.Uri.parse(params.uri).fsPath);
            if (parsed) {
              const doc = vscode.workspace.textDocuments.find(
                (d) => d.uri.scheme === "file" && stem(d.uri.fsPath) === parsed.stem,
              );
              if (doc && (await this.showDiff(doc.uri.toString(), parsed.target)).shown) {
                return { success: true };
              }
            }
            return next(params, token);
          },
        },
      },
    };
    const client = new LanguageClient(CLIENT_ID, "Kernel Agent", serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((event) => {
      if (event.newState === State.Stopped) this.updateStatus();
    });
    try {
      await client.start();
      this.brokenNotified = false;
      this.updateStatus();
      this.pollSoon(2_000);
    } catch (error) {
      const message = redact(String(error instanceof Error ? error.message : error), this.secrets);
      this.log(`the language server failed to start: ${message}`);
      this.client = undefined;
      this.updateStatus(message);
      this.notifyBroken(message);
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.jobs = [];
    if (this.pollTimer) clearTimeout(this.pollTimer);
    if (client) {
      try {
        await client.stop(10_000);
      } catch (error) {
        this.log(`stopping the server: ${error}`);
      }
      client.dispose();
    }
    this.updateStatus();
  }

  async restart(userAsked: boolean): Promise<void> {
    this.restarting = true;
    if (userAsked) this.brokenNotified = false;
    try {
      await this.starting;
      await this.stop();
      this.crashes = [];
    } finally {
      this.restarting = false;
    }
    await this.start();
    if (userAsked && this.client) vscode.window.setStatusBarMessage("Kernel Agent: server restarted", 3000);
  }

  private onClosed(): { action: CloseAction; message?: string } {
    const now = Date.now();
    this.crashes = this.crashes.filter((t) => now - t < 180_000);
    this.crashes.push(now);
    if (this.crashes.length <= 3) return { action: CloseAction.Restart };
    const message =
      "The Kernel Agent language server stopped 4 times in 3 minutes and will not be restarted. See the Kernel Agent output channel, then run Kernel Agent: Restart Server.";
    return { action: CloseAction.DoNotRestart, message };
  }

  private notifyBroken(problem: string): void {
    if (this.brokenNotified) return;
    this.brokenNotified = true;
    const setup = "Open Setup Instructions";
    const settings = "Set Interpreter";
    const log = "Show Log";
    void vscode.window
      .showErrorMessage(`Kernel Agent: the language server cannot start: ${problem}.`, setup, settings, log)
      .then((choice) => {
        if (choice === setup) void this.openSetup();
        else if (choice === settings)
          void vscode.commands.executeCommand("workbench.action.openSettings", "kernelAgent.interpreter");
        else if (choice === log) this.output.show(true);
      });
  }

  private async openSetup(): Promise<void> {
    // vsce stores the README as readme.md; a development checkout has README.md
    let readme = vscode.Uri.joinPath(this.context.extensionUri, "README.md");
    for (const name of ["README.md", "readme.md"]) {
      const candidate = vscode.Uri.joinPath(this.context.extensionUri, name);
      try {
        await vscode.workspace.fs.stat(candidate);
        readme = candidate;
        break;
      } catch {}
    }
    try {
      await vscode.commands.executeCommand("markdown.showPreview", readme.with({ fragment: "setup" }));
    } catch {
      await vscode.window.showTextDocument(readme);
    }
  }

  private settingsFor(scopeUri: string | undefined): Record<string, unknown> {
    const scope = scopeUri ? vscode.Uri.parse(scopeUri) : vscode.workspace.workspaceFolders?.[0]?.uri;
    const config = vscode.workspace.getConfiguration(SECTION, scope);
    return serverSettings((key) => config.get(key));
  }

  private log(line: string): void {
    this.output.info(`[client] ${redact(line, this.secrets)}`);
  }

  private watchPythonExtension(): void {
    const ext = vscode.extensions.getExtension("ms-python.python");
    if (!ext) return;
    void Promise.resolve(ext.isActive ? ext.exports : ext.activate()).then(
      (api: any) => {
        const event = api?.environments?.onDidChangeActiveEnvironmentPath;
        if (typeof event !== "function") return;
        this.context.subscriptions.push(
          event(() => {
            if (!vscode.workspace.getConfiguration(SECTION).get<string>("interpreter")?.trim()) {
              this.brokenNotified = false;
              void this.restart(false);
            }
          }),
        );
      },
      () => undefined,
    );
  }

  // -- API keys -------------------------------------------------------------------------

  private async readKeys(): Promise<Partial<Record<KeyBackend, string>>> {
    const keys: Partial<Record<KeyBackend, string>> = {};
    for (const { backend } of KEY_BACKENDS) {
      const key = await this.context.secrets.get(secretName(backend));
      if (key) keys[backend] = key;
    }
    return keys;
  }

  private async setApiKey(): Promise<void> {
    const stored = await this.readKeys();
    const pick = await vscode.window.showQuickPick(
      KEY_BACKENDS.map((b) => ({
        label: b.label,
        description: stored[b.backend] ? "a key is stored" : "",
        detail: `Passed to the server as ${b.env}; kept in VS Code's secret storage, never in settings.`,
        backend: b.backend,
      })),
      { title: "Kernel Agent: Set API Key", placeHolder: "Which provider's key?" },
    );
    if (!pick) return;
    const key = await vscode.window.showInputBox({
      title: `Kernel Agent: ${pick.label} API key`,
      prompt: "Stored in VS Code's secret storage. Leave empty to remove the stored key.",
      password: true,
      ignoreFocusOut: true,
    });
    if (key === undefined) return;
    const name = secretName(pick.backend);
    if (key.trim()) {
      await this.context.secrets.store(name, key.trim());
      void vscode.window.showInformationMessage(
        `Kernel Agent: the ${pick.label} key is stored; the server restarts to use it.`,
      );
    } else {
      await this.context.secrets.delete(name);
      void vscode.window.showInformationMessage(`Kernel Agent: the ${pick.label} key is removed.`);
    }
    // secrets.onDidChange restarts the server
  }

  // -- jobs and the status bar ---------------------------------------------------------

  private async request<T>(command: string, arg: object): Promise<T | undefined> {
    const client = this.client;
    if (!client || client.state !== State.Running) return undefined;
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] })) as T;
  }

  private pollSoon(forMs: number): void {
    this.pollUntil = Math.max(this.pollUntil, Date.now() + forMs);
    if (this.pollTimer === undefined) this.pollTimer = setTimeout(() => void this.poll(), 300);
  }

  private async poll(): Promise<void> {
    this.pollTimer = undefined;
    try {
      const jobs = (await this.request<JobInfo[]>("kernelAgent.jobs", {})) ?? [];
      this.jobs = Array.isArray(jobs) ? jobs : [];
    } catch (error) {
      this.jobs = [];
    }
    this.updateStatus();
    if (this.client && (this.jobs.length > 0 || this.progress.active > 0 || Date.now() < this.pollUntil)) {
      this.pollTimer = setTimeout(() => void this.poll(), 1500);
    }
  }

  private updateStatus(problem?: string): void {
    if (!vscode.workspace.isTrusted) {
      this.status.text = "$(shield) Kernel Agent";
      this.status.tooltip = RESTRICTED;
      this.status.command = { command: "workbench.trust.manage", title: "Manage Workspace Trust" };
      return;
    }
    if (problem !== undefined || (!this.client && !this.starting)) {
      this.status.text = "$(error) Kernel Agent";
      this.status.tooltip = problem
        ? `Kernel Agent: the server cannot start: ${problem}. Click to restart.`
        : "Kernel Agent: the server is stopped. Click to restart.";
      this.status.command = "kernelAgent.restartServer";
      return;
    }
    const { text, tooltip } = statusText(this.jobs, this.speedups.verified);
    this.status.text = text;
    this.status.tooltip = tooltip;
    this.status.command = "kernelAgent.showJobs";
  }

  private async showJobs(): Promise<void> {
    if (!this.ensureTrusted()) return;
    const jobs = (await this.request<JobInfo[]>("kernelAgent.jobs", {})) ?? [];
    this.jobs = jobs;
    this.updateStatus();
    if (jobs.length === 0) {
      const last = this.speedups.verified;
      const where = last?.target ? ` (\`${last.target}\`)` : "";
      const said = last ? ` The last search's kernel${where}: ${last.summary}.` : "";
      void vscode.window.showInformationMessage(`Kernel Agent: no job is running.${said}`);
      return;
    }
    type Item = vscode.QuickPickItem & { job: JobInfo };
    const cancelButton: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon("close"), tooltip: "Cancel this job" };
    const quick = vscode.window.createQuickPick<Item>();
    quick.title = "Kernel Agent: running jobs";
    quick.placeholder = "Select a job to cancel it";
    quick.items = jobs.map((job) => ({
      label: `$(sync~spin) ${jobLabel(job)}`,
      description: vscode.workspace.asRelativePath(vscode.Uri.parse(job.uri)),
      detail: "Cancel",
      buttons: [cancelButton],
      job,
    }));
    const cancel = async (item: Item | undefined) => {
      quick.hide();
      if (!item) return;
      await this.request("kernelAgent.cancel", { jobId: item.job.jobId });
      this.pollSoon(5_000);
    };
    quick.onDidTriggerItemButton((e) => void cancel(e.item));
    quick.onDidAccept(() => void cancel(quick.selectedItems[0]));
    quick.onDidHide(() => quick.dispose());
    quick.show();
  }

  private ensureTrusted(): boolean {
    if (vscode.workspace.isTrusted) {
      if (!this.client) {
        void vscode.window.showWarningMessage("Kernel Agent: the language server is not running.", "Restart Server").then(
          (c) => c && this.restart(true),
        );
        return false;
      }
      return true;
    }
    void vscode.window.showWarningMessage(RESTRICTED, "Manage Workspace Trust").then((choice) => {
      if (choice) void vscode.commands.executeCommand("workbench.trust.manage");
    });
    return false;
  }

  // -- rewrites: diff, accept, reject --------------------------------------------------

  private async fetchRewrite(uri: string, target: string): Promise<PendingRewrite | undefined> {
    const answer = await this.request<{ rewrites: PendingRewrite[] }>("kernelAgent.pendingRewrite", { uri, target });
    return answer?.rewrites?.[0];
  }

  private diffUris(uri: string, target: string): { left: vscode.Uri; right: vscode.Uri } {
    const side = (s: "original" | "rewritten") => vscode.Uri.from(rewriteUriParts({ uri, target, side: s }));
    return { left: side("original"), right: side("rewritten") };
  }

  async showDiff(uri: string, target: string): Promise<{ shown: boolean; uri?: string }> {
    const rewrite = await this.fetchRewrite(uri, target);
    if (!rewrite) {
      void vscode.window.showInformationMessage(`Kernel Agent: no rewrite of \`${target}\` is waiting.`);
      return { shown: false };
    }
    const { left, right } = this.diffUris(uri, target);
    this.documents.set(left, rewrite.original);
    this.documents.set(right, rewrite.rewritten);
    if (rewrite.stale) {
      void vscode.window.showWarningMessage(
        `Kernel Agent: ${rewrite.stale} The diff is against the code as it was when the search started.`,
      );
    }
    await vscode.commands.executeCommand("vscode.diff", left, right, diffTitle(uri, target, rewrite.summary), {
      preview: false,
    });
    return { shown: true, uri: right.toString() };
  }

  /** The rewrite a command means: the diff editor's (from its title bar or focus), else
   * one waiting in the active Python file (asked when several wait). */
  private async refFor(arg: unknown): Promise<{ uri: string; target: string; fromDiff?: boolean } | undefined> {
    if (arg instanceof vscode.Uri) {
      const ref = parseRewriteUri(arg);
      if (ref) return { ...ref, fromDiff: true };
    }
    if (isRef(arg)) return arg;
    const tab = vscode.window.tabGroups.activeTabGroup.activeTab?.input;
    if (tab instanceof vscode.TabInputTextDiff) {
      const ref = parseRewriteUri(tab.modified) ?? parseRewriteUri(tab.original);
      if (ref) return { ...ref, fromDiff: true };
    }
    const active = vscode.window.activeTextEditor?.document.uri;
    if (active) {
      const ref = parseRewriteUri(active);
      if (ref) return { ...ref, fromDiff: true };
    }
    const doc = vscode.window.activeTextEditor?.document;
    if (!doc || doc.languageId !== "python") {
      void vscode.window.showInformationMessage("Kernel Agent: open the Python file whose rewrite you want.");
      return undefined;
    }
    const answer = await this.request<{ rewrites: PendingRewrite[] }>("kernelAgent.pendingRewrite", {
      uri: doc.uri.toString(),
    });
    const rewrites = answer?.rewrites ?? [];
    if (rewrites.length === 0) {
      void vscode.window.showInformationMessage("Kernel Agent: no rewrite is waiting in this file.");
      return undefined;
    }
    if (rewrites.length === 1) return rewrites[0];
    const pick = await vscode.window.showQuickPick(
      rewrites.map((r) => ({ label: r.target, description: r.summary, rewrite: r })),
      { placeHolder: "Which target's rewrite?" },
    );
    return pick?.rewrite;
  }

  private async showDiffCommand(arg: unknown): Promise<void> {
    if (!this.ensureTrusted()) return;
    const ref = await this.refFor(arg);
    if (ref) await this.showDiff(ref.uri, ref.target);
  }

  private async decide(what: "accept" | "reject", arg: unknown): Promise<void> {
    if (!this.ensureTrusted()) return;
    const ref = await this.refFor(arg);
    if (!ref) return;
    const key = `${ref.uri}\n${ref.target}`;
    // accepted from the diff editor: the user has reviewed it, no second preview
    if (what === "accept" && ref.fromDiff) this.acceptingFromDiff.add(key);
    try {
      const result = await this.request<{ applied?: boolean; rejected?: boolean }>(`kernelAgent.${what}`, {
        uri: ref.uri,
        target: ref.target,
      });
      if (result?.applied || result?.rejected) await this.closeDiff(ref.uri, ref.target);
      if (result?.applied) {
        const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === ref.uri);
        if (doc) await vscode.window.showTextDocument(doc, { preview: false });
      }
    } finally {
      this.acceptingFromDiff.delete(key);
    }
  }

  private async closeDiff(uri: string, target: string): Promise<void> {
    const tabs: vscode.Tab[] = [];
    for (const group of vscode.window.tabGroups.all) {
      for (const tab of group.tabs) {
        const input = tab.input;
        const ref =
          input instanceof vscode.TabInputTextDiff
            ? parseRewriteUri(input.modified)
            : input instanceof vscode.TabInputText
              ? parseRewriteUri(input.uri)
              : undefined;
        if (ref && ref.uri === uri && ref.target === target) tabs.push(tab);
      }
    }
    if (tabs.length) await vscode.window.tabGroups.close(tabs);
  }
}

function isRef(value: unknown): value is { uri: string; target: string } {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as any).uri === "string" &&
    typeof (value as any).target === "string"
  );
}

function stem(path: string): string {
  const name = path.split(/[\\/]/).pop() ?? path;
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(0, dot) : name;
}

function isExecutable(path: string): boolean {
  try {
    fs.accessSync(path, fs.constants.X_OK);
    return fs.statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The Python extension's selected interpreter, when that extension is installed. */
async function pythonExtensionInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension("ms-python.python");
  if (!ext) return undefined;
  try {
    const api: any = ext.isActive ? ext.exports : await ext.activate();
    const active = api?.environments?.getActiveEnvironmentPath?.(resource);
    if (active?.path) return active.path;
    const details = api?.settings?.getExecutionDetails?.(resource);
    return details?.execCommand?.[0];
  } catch {
    return undefined;
  }
}

/** Undefined when the environment can run the server, else one line saying why not. */
function checkServer(
  server: ServerCommand,
  env: { [name: string]: string },
  cwd: string | undefined,
): Promise<string | undefined> {
  const check = checkCommand(server);
  return new Promise((resolve) => {
    cp.execFile(check.command, check.args, { env, cwd, timeout: 60_000 }, (error, stdout, stderr) => {
      if (!error) return resolve(undefined);
      resolve(explainFailure(server, `${String(error.message)}\n${stderr}\n${stdout}`));
    });
  });
}
