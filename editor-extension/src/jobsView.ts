// Jobs as the user sees them: each job's `$/progress` as a cancellable notification, and a
// status bar item with the running jobs (pushed by the server as `kernelAgent/jobsChanged`,
// asked once on connect: no polling) and the last search's verified result; clicking it
// lists the jobs to cancel one.

import * as vscode from "vscode";
import { RESTRICTED, type ServerClient } from "./client.ts";
import { type JobInfo, JobBoard, SpeedupStatus, jobLabel, statusText } from "./jobs.ts";

type ProgressParams = { kind: string; title?: string; message?: string; percentage?: number; cancellable?: boolean };
type Reporter = vscode.Progress<{ message?: string; increment?: number }>;
type Entry = {
  progress?: Reporter;
  resolve?: () => void;
  reported: number;
  ended: boolean;
  last?: { message?: string; percentage?: number };
};

/** The server's `$/progress` as notifications (vscode-languageclient shows it only in the
 * status bar), cancellable: cancelling sends window/workDoneProgress/cancel. */
class NotificationProgress {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly cancel: (token: string) => void) {}

  handle(token: string, params: ProgressParams): void {
    if (params.kind === "begin") {
      const entry: Entry = { reported: 0, ended: false, last: params };
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

  private report(entry: Entry, params: { message?: string; percentage?: number }): void {
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

export class JobsView {
  private readonly status: vscode.StatusBarItem;
  private readonly notifications: NotificationProgress;
  private readonly board = new JobBoard();
  /** The last finished search's confirmed result (never a maximum over running bests). */
  private readonly speedups = new SpeedupStatus();
  private server: ServerClient | undefined;

  constructor() {
    this.status = vscode.window.createStatusBarItem("kernelAgent.status", vscode.StatusBarAlignment.Left, 50);
    this.status.name = "Kernel Agent";
    this.notifications = new NotificationProgress((token) => {
      this.server?.notify("window/workDoneProgress/cancel", { token });
    });
  }

  /** The client whose jobs this shows (set once, after both exist). */
  attach(server: ServerClient): void {
    this.server = server;
    this.update();
    this.status.show();
  }

  progress(token: string, params: ProgressParams): void {
    this.notifications.handle(token, params);
    this.speedups.progress(token, params);
    if (params.kind === "end") this.update(); // the verified figure, before the next push
  }

  jobsChanged(params: unknown): void {
    if (this.board.pushed(params)) this.update();
  }

  /** Ask for the jobs once (the server pushes every change after that). */
  async connected(): Promise<void> {
    const mark = this.board.asking();
    try {
      const answer = await this.server?.request<JobInfo[]>("kernelAgent.jobs", {});
      if (this.board.answered(mark, answer ?? [])) this.update();
    } catch {
      // the server went away meanwhile: `stopped` clears the list
    }
  }

  stopped(): void {
    this.board.clear();
  }

  update(problem?: string): void {
    if (!vscode.workspace.isTrusted) {
      this.status.text = "$(shield) Kernel Agent";
      this.status.tooltip = RESTRICTED;
      this.status.command = { command: "workbench.trust.manage", title: "Manage Workspace Trust" };
      return;
    }
    if (problem !== undefined || !this.server?.present) {
      this.status.text = "$(error) Kernel Agent";
      this.status.tooltip = problem
        ? `Kernel Agent: the server cannot start: ${problem}. Click to restart.`
        : "Kernel Agent: the server is stopped. Click to restart.";
      this.status.command = "kernelAgent.restartServer";
      return;
    }
    const { text, tooltip } = statusText(this.board.jobs, this.speedups.verified);
    this.status.text = text;
    this.status.tooltip = tooltip;
    this.status.command = "kernelAgent.showJobs";
  }

  /** The running jobs (asked afresh) in a quick pick; picking one cancels it. */
  async showJobs(): Promise<void> {
    const mark = this.board.asking();
    const jobs = (await this.server?.request<JobInfo[]>("kernelAgent.jobs", {})) ?? [];
    if (this.board.answered(mark, jobs)) this.update();
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
      if (item) await this.server?.request("kernelAgent.cancel", { jobId: item.job.jobId });
    };
    quick.onDidTriggerItemButton((e) => void cancel(e.item));
    quick.onDidAccept(() => void cancel(quick.selectedItems[0]));
    quick.onDidHide(() => quick.dispose());
    quick.show();
  }

  dispose(): void {
    this.notifications.dispose();
    this.status.dispose();
  }
}
