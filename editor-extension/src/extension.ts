// Kernel Agent for VS Code: starts `kernel-agent serve` (or `<python> -m server`) for Python
// files and adds what a generic LSP client lacks: API keys from SecretStorage, a status bar
// of jobs the server pushes, notification progress, a side-by-side diff of a waiting rewrite
// with Accept and Reject, and Restricted Mode handling. Lenses, code actions and diagnostics
// come from the server through vscode-languageclient.
//
// The parts: client.ts (the server process and the client), jobsView.ts (progress and the
// status bar), diffView.ts (the diff, Accept and Reject), apiKeys.ts; this file wires them
// and registers the commands.

import * as vscode from "vscode";
import { setApiKey } from "./apiKeys.ts";
import { RESTRICTED, SECTION, ServerClient } from "./client.ts";
import { DiffView } from "./diffView.ts";
import { JobsView } from "./jobsView.ts";
import { needsRestart } from "./settings.ts";

let agent: KernelAgent | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  agent = new KernelAgent(context);
  await agent.activate();
}

export async function deactivate(): Promise<void> {
  await agent?.stop();
  agent = undefined;
}

class KernelAgent {
  private readonly output: vscode.LogOutputChannel;
  private readonly jobs: JobsView;
  private readonly server: ServerClient;
  private readonly diff: DiffView;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.output = vscode.window.createOutputChannel("Kernel Agent", { log: true });
    this.jobs = new JobsView();
    const jobs = this.jobs;
    this.server = new ServerClient(context, this.output, {
      progress: (token, params) => jobs.progress(token, params),
      jobsChanged: (params) => jobs.jobsChanged(params),
      connected: () => void jobs.connected(),
      stopped: () => jobs.stopped(),
      stateChanged: (problem) => jobs.update(problem),
      showDiff: (uri, target) => this.diff.showDiff(uri, target),
      acceptedFromDiff: (uris) => this.diff.acceptedFromDiff(uris),
    });
    this.diff = new DiffView(this.server);
  }

  async activate(): Promise<void> {
    const c = this.context;
    const command = (id: string, run: (...args: any[]) => unknown) =>
      c.subscriptions.push(vscode.commands.registerCommand(id, run));
    const trusted =
      (run: (arg?: unknown) => Promise<void>) =>
      (arg?: unknown): Promise<void> | undefined =>
        this.ensureTrusted() ? run(arg) : undefined;
    c.subscriptions.push(this.output, this.jobs, ...this.diff.register());
    command("kernelAgent.restartServer", () => this.server.restart(true));
    command("kernelAgent.setApiKey", () => setApiKey(c.secrets));
    command("kernelAgent.showJobs", trusted(() => this.jobs.showJobs()));
    command("kernelAgent.showRewriteDiff", trusted((arg) => this.diff.showDiffCommand(arg)));
    command("kernelAgent.acceptRewrite", trusted((arg) => this.diff.decide("accept", arg)));
    command("kernelAgent.rejectRewrite", trusted((arg) => this.diff.decide("reject", arg)));
    command("kernelAgent.showOutput", () => this.output.show(true));
    command("kernelAgent.openSetup", () => this.openSetup());

    c.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (!event.affectsConfiguration(SECTION)) return;
        if (needsRestart((s) => event.affectsConfiguration(s))) this.server.restartQuietly();
        // other keys reach the running server through didChangeConfiguration (middleware)
      }),
      vscode.workspace.onDidGrantWorkspaceTrust(() => void this.server.start()),
      c.secrets.onDidChange((event) => {
        if (event.key.startsWith("kernelAgent.apiKey.")) void this.server.restart(false);
      }),
    );
    this.server.watchPythonExtension();
    this.jobs.attach(this.server);
    await this.server.start();
  }

  async stop(): Promise<void> {
    await this.server.stop();
  }

  private ensureTrusted(): boolean {
    if (vscode.workspace.isTrusted) {
      if (!this.server.running) {
        void vscode.window
          .showWarningMessage("Kernel Agent: the language server is not running.", "Restart Server")
          .then((c) => c && this.server.restart(true));
        return false;
      }
      return true;
    }
    void vscode.window.showWarningMessage(RESTRICTED, "Manage Workspace Trust").then((choice) => {
      if (choice) void vscode.commands.executeCommand("workbench.trust.manage");
    });
    return false;
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
}
