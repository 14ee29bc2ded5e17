// The language server's process and its client: which interpreter runs `<python> -m server`,
// the checks before it starts, restarts (settings, keys, the Python extension's interpreter),
// the crash policy, and the client's middleware, which hands progress, diffs and job lists
// to the parts that show them (`ClientHooks`).

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
  type StaticFeature,
  State,
} from "vscode-languageclient/node";
import { readKeys } from "./apiKeys.ts";
import { type ServerCommand, checkCommand, chooseServerCommand, explainFailure } from "./interpreter.ts";
import { JOBS_CHANGED } from "./jobs.ts";
import { parseRewriteUriString } from "./rewriteUri.ts";
import { redact, serverEnvironment, serverSettings } from "./settings.ts";

export const SECTION = "kernelAgent";
const CLIENT_ID = "kernelAgent";
export const PROGRESS_PREFIX = "kernel-agent/";
export const RESTRICTED =
  "Kernel Agent is disabled in Restricted Mode: optimising and profiling run this workspace's Python code (and the language server runs the configured interpreter). Trust the workspace to enable it.";

/** What the rest of the extension does with what the server sends. */
export interface ClientHooks {
  /** A job's `$/progress` (tokens `kernel-agent/<jobId>`). */
  progress(token: string, params: { kind: string; title?: string; message?: string; percentage?: number; cancellable?: boolean }): void;
  /** The server's `kernelAgent/jobsChanged` push. */
  jobsChanged(params: unknown): void;
  /** The client is up (started, or restarted after a crash): ask for the jobs once. */
  connected(): void;
  /** The server process ended: its jobs ended with it. */
  stopped(): void;
  /** The server stopped, failed to start, or started: redraw (a problem in one line). */
  stateChanged(problem?: string): void;
  /** Show a target's rewrite as the side-by-side diff. */
  showDiff(uri: string, target: string): Promise<{ shown: boolean }>;
  /** Whether an edit to these documents was accepted from the diff editor (no second preview). */
  acceptedFromDiff(uris: string[]): boolean;
}

/** Kernel Agent's own client capabilities (server/client_features.py reads them). */
const OWN_CAPABILITIES: StaticFeature = {
  fillClientCapabilities(capabilities) {
    capabilities.experimental = {
      ...(capabilities.experimental ?? {}),
      kernelAgent: { jobsChanged: true, rewriteUri: true },
    };
  },
  initialize() {},
  getState: () => ({ kind: "static" }),
  clear() {},
};

export class ServerClient {
  private client: LanguageClient | undefined;
  private starting: Promise<void> | undefined;
  private brokenNotified = false;
  private crashes: number[] = [];
  private secrets: string[] = [];
  private restarting = false;

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly output: vscode.LogOutputChannel,
    private readonly hooks: ClientHooks,
  ) {}

  /** Whether a client exists or is being started (the status bar's "stopped" test). */
  get present(): boolean {
    return this.client !== undefined || this.starting !== undefined;
  }

  get running(): boolean {
    return this.client !== undefined;
  }

  /** A `workspace/executeCommand` to the running server (undefined when none runs). */
  async request<T>(command: string, arg: object): Promise<T | undefined> {
    const client = this.client;
    if (!client || client.state !== State.Running) return undefined;
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [arg] })) as T;
  }

  notify(method: string, params: object): void {
    void this.client?.sendNotification(method, params);
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
      this.hooks.stateChanged();
      return;
    }
    const server = await resolveServer();
    const keys = await readKeys(this.context.secrets);
    this.secrets = Object.values(keys).filter((k): k is string => !!k);
    const env = serverEnvironment(process.env, keys);
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    const problem = server ? await checkServer(server, env, cwd) : explainFailure(undefined, "");
    if (problem) {
      this.log(`cannot start the language server: ${problem}`);
      this.failed(problem);
      return;
    }
    const s = server!;
    const initializationOptions = settingsFor(undefined);
    this.log(`starting ${s.command} ${s.args.join(" ")} (interpreter from ${s.source})`);
    this.log(`settings: ${JSON.stringify(initializationOptions)}`);
    const serverOptions: ServerOptions = { command: s.command, args: s.args, options: { env, cwd } };
    const client = new LanguageClient(CLIENT_ID, "Kernel Agent", serverOptions, this.options(initializationOptions));
    client.registerFeature(OWN_CAPABILITIES);
    client.onNotification(JOBS_CHANGED, (params: unknown) => this.hooks.jobsChanged(params));
    this.client = client;
    client.onDidChangeState((event) => {
      if (event.newState === State.Stopped) {
        this.hooks.stopped();
        this.hooks.stateChanged();
      } else if (event.newState === State.Running && !this.starting) {
        this.hooks.connected(); // restarted after a crash
      }
    });
    try {
      await client.start();
      this.brokenNotified = false;
      this.hooks.stateChanged();
      this.hooks.connected();
    } catch (error) {
      const message = redact(String(error instanceof Error ? error.message : error), this.secrets);
      this.log(`the language server failed to start: ${message}`);
      this.client = undefined;
      this.failed(message);
    }
  }

  private options(initializationOptions: Record<string, unknown>): LanguageClientOptions {
    const hooks = this.hooks;
    return {
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
            return params.items.map((item, i) => (item.section === SECTION ? settingsFor(item.scopeUri) : answer[i]));
          },
          // the server then asks workspace/configuration, answered above
          didChangeConfiguration: async (_sections, next) => {
            // a change that restarts the server is not sent to the one being stopped
            if (this.restarting || this.client?.state !== State.Running) return;
            return next(undefined);
          },
          handleApplyEdit: (params, next) => {
            const uris = (params.edit.documentChanges ?? []).map((c: any) => c?.textDocument?.uri).filter(Boolean);
            if (params.edit.changeAnnotations && hooks.acceptedFromDiff(uris)) {
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
            return hooks.showDiff(args[0].uri, args[0].target);
          }
          return next(command, args);
        },
        handleWorkDoneProgress: (token, params, next) => {
          if (typeof token === "string" && token.startsWith(PROGRESS_PREFIX)) {
            hooks.progress(token, params);
            if (params.kind === "end") next(token, params); // let the client drop its handler
            return;
          }
          next(token, params);
        },
        window: {
          showDocument: async (params, token, next) => {
            // the server's own "Show diff" (after a job ends) names a kernel-agent-rewrite:
            // URI (server/rewrite_diff.py): show the side-by-side diff
            const ref = parseRewriteUriString(params.uri);
            if (!ref) return next(params, token);
            return { success: (await hooks.showDiff(ref.uri, ref.target)).shown };
          },
        },
      },
    };
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(10_000);
      } catch (error) {
        this.log(`stopping the server: ${error}`);
      }
      client.dispose();
    }
    this.hooks.stopped();
    this.hooks.stateChanged();
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

  /** A restart the user did not ask for (settings, keys, interpreter): may notify again. */
  restartQuietly(): void {
    this.brokenNotified = false;
    void this.restart(false);
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

  private failed(problem: string): void {
    this.hooks.stateChanged(problem);
    if (this.brokenNotified) return;
    this.brokenNotified = true;
    const setup = "Open Setup Instructions";
    const settings = "Set Interpreter";
    const log = "Show Log";
    void vscode.window
      .showErrorMessage(`Kernel Agent: the language server cannot start: ${problem}.`, setup, settings, log)
      .then((choice) => {
        if (choice === setup) void vscode.commands.executeCommand("kernelAgent.openSetup");
        else if (choice === settings)
          void vscode.commands.executeCommand("workbench.action.openSettings", "kernelAgent.interpreter");
        else if (choice === log) this.output.show(true);
      });
  }

  log(line: string): void {
    this.output.info(`[client] ${redact(line, this.secrets)}`);
  }

  /** Restart when the Python extension's interpreter changes and none is set here. */
  watchPythonExtension(): void {
    const ext = vscode.extensions.getExtension("ms-python.python");
    if (!ext) return;
    void Promise.resolve(ext.isActive ? ext.exports : ext.activate()).then(
      (api: any) => {
        const event = api?.environments?.onDidChangeActiveEnvironmentPath;
        if (typeof event !== "function") return;
        this.context.subscriptions.push(
          event(() => {
            if (!vscode.workspace.getConfiguration(SECTION).get<string>("interpreter")?.trim()) this.restartQuietly();
          }),
        );
      },
      () => undefined,
    );
  }
}

export function isRef(value: unknown): value is { uri: string; target: string } {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as any).uri === "string" &&
    typeof (value as any).target === "string"
  );
}

function settingsFor(scopeUri: string | undefined): Record<string, unknown> {
  const scope = scopeUri ? vscode.Uri.parse(scopeUri) : vscode.workspace.workspaceFolders?.[0]?.uri;
  const config = vscode.workspace.getConfiguration(SECTION, scope);
  return serverSettings((key) => config.get(key));
}

async function resolveServer(): Promise<ServerCommand | undefined> {
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
