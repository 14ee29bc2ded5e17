// A waiting rewrite as a side-by-side diff (two read-only `kernel-agent-rewrite:` documents,
// see rewriteUri.ts), and Accept or Reject from the diff's title bar, a lens or the palette.

import * as vscode from "vscode";
import { type ServerClient, isRef } from "./client.ts";
import { type RewriteRef, SCHEME, diffTitle, parseRewriteUri, rewriteUriParts } from "./rewriteUri.ts";

type PendingRewrite = {
  uri: string;
  target: string;
  original: string;
  rewritten: string;
  summary: string;
  mode: string;
  stale: string | null;
};

type Ref = { uri: string; target: string; fromDiff?: boolean };

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

export class DiffView {
  private readonly documents: RewriteDocuments;
  /** Targets being accepted from the diff editor: their edit needs no second preview. */
  private readonly acceptingFromDiff = new Set<string>();

  constructor(private readonly server: ServerClient) {
    this.documents = new RewriteDocuments((ref) => this.fetchRewrite(ref.uri, ref.target));
  }

  /** The content provider of the `kernel-agent-rewrite` scheme, to dispose with the extension. */
  register(): vscode.Disposable[] {
    return [this.documents, vscode.workspace.registerTextDocumentContentProvider(SCHEME, this.documents)];
  }

  /** Whether an edit to one of `uris` is being accepted from the diff editor. */
  acceptedFromDiff(uris: string[]): boolean {
    const keys = [...this.acceptingFromDiff];
    return uris.some((u) => keys.some((k) => k.startsWith(`${u}\n`)));
  }

  private async fetchRewrite(uri: string, target: string): Promise<PendingRewrite | undefined> {
    const answer = await this.server.request<{ rewrites: PendingRewrite[] }>("kernelAgent.pendingRewrite", { uri, target });
    return answer?.rewrites?.[0];
  }

  async showDiff(uri: string, target: string): Promise<{ shown: boolean; uri?: string }> {
    const rewrite = await this.fetchRewrite(uri, target);
    if (!rewrite) {
      void vscode.window.showInformationMessage(`Kernel Agent: no rewrite of \`${target}\` is waiting.`);
      return { shown: false };
    }
    const side = (s: "original" | "rewritten") => vscode.Uri.from(rewriteUriParts({ uri, target, side: s }));
    const left = side("original");
    const right = side("rewritten");
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

  async showDiffCommand(arg: unknown): Promise<void> {
    const ref = await this.refFor(arg);
    if (ref) await this.showDiff(ref.uri, ref.target);
  }

  async decide(what: "accept" | "reject", arg: unknown): Promise<void> {
    const ref = await this.refFor(arg);
    if (!ref) return;
    const key = `${ref.uri}\n${ref.target}`;
    // accepted from the diff editor: the user has reviewed it, no second preview
    if (what === "accept" && ref.fromDiff) this.acceptingFromDiff.add(key);
    try {
      const result = await this.server.request<{ applied?: boolean; rejected?: boolean }>(`kernelAgent.${what}`, {
        uri: ref.uri,
        target: ref.target,
      });
      if (result?.applied || result?.rejected) await closeDiff(ref.uri, ref.target);
      if (result?.applied) {
        const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === ref.uri);
        if (doc) await vscode.window.showTextDocument(doc, { preview: false });
      }
    } finally {
      this.acceptingFromDiff.delete(key);
    }
  }

  /** The rewrite a command means: the diff editor's (from its title bar or focus), else
   * one waiting in the active Python file (asked when several wait). */
  private async refFor(arg: unknown): Promise<Ref | undefined> {
    const fromArg = arg instanceof vscode.Uri ? parseRewriteUri(arg) : undefined;
    if (fromArg) return { uri: fromArg.uri, target: fromArg.target, fromDiff: true };
    if (isRef(arg)) return arg;
    const shown = diffShown();
    if (shown) return shown;
    const doc = vscode.window.activeTextEditor?.document;
    if (!doc || doc.languageId !== "python") {
      void vscode.window.showInformationMessage("Kernel Agent: open the Python file whose rewrite you want.");
      return undefined;
    }
    const answer = await this.server.request<{ rewrites: PendingRewrite[] }>("kernelAgent.pendingRewrite", {
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
}

/** The rewrite of the diff in focus: the active diff tab's, or the active editor's, when
 * it is a `kernel-agent-rewrite:` document. */
function diffShown(): Ref | undefined {
  const candidates: (vscode.Uri | undefined)[] = [];
  const tab = vscode.window.tabGroups.activeTabGroup.activeTab?.input;
  if (tab instanceof vscode.TabInputTextDiff) candidates.push(tab.modified, tab.original);
  candidates.push(vscode.window.activeTextEditor?.document.uri);
  for (const uri of candidates) {
    const ref = uri ? parseRewriteUri(uri) : undefined;
    if (ref) return { uri: ref.uri, target: ref.target, fromDiff: true };
  }
  return undefined;
}

async function closeDiff(uri: string, target: string): Promise<void> {
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
