// URIs of the read-only documents a rewrite's diff shows: scheme `kernel-agent-rewrite`,
// the path names the file and target (VS Code shows it as the tab's title and picks the
// language from its extension), the query carries the document's URI, target and side.

export const SCHEME = "kernel-agent-rewrite";

export type Side = "original" | "rewritten";

export type RewriteRef = { uri: string; target: string; side: Side };

export type UriParts = { scheme: string; path: string; query: string };

function basename(uri: string): string {
  const path = decodeURIComponent(uri.replace(/[?#].*$/, ""));
  return path.split("/").filter(Boolean).pop() ?? "document.py";
}

/** The parts of the virtual document's URI for one side of a target's diff. */
export function rewriteUriParts(ref: RewriteRef): UriParts {
  const name = basename(ref.uri);
  const dot = name.lastIndexOf(".");
  const stem = dot > 0 ? name.slice(0, dot) : name;
  const ext = dot > 0 ? name.slice(dot) : ".py";
  const label = ref.side === "original" ? "current" : "rewrite";
  const query = new URLSearchParams({ uri: ref.uri, target: ref.target, side: ref.side });
  return { scheme: SCHEME, path: `/${stem} (${ref.target}, ${label})${ext}`, query: query.toString() };
}

/** The reference a virtual document's URI carries, or undefined for any other URI. */
export function parseRewriteUri(parts: { scheme: string; query: string }): RewriteRef | undefined {
  if (parts.scheme !== SCHEME) return undefined;
  const query = new URLSearchParams(parts.query);
  const uri = query.get("uri");
  const target = query.get("target");
  const side = query.get("side");
  if (!uri || !target || (side !== "original" && side !== "rewritten")) return undefined;
  return { uri, target, side };
}

/** The diff editor's title. */
export function diffTitle(uri: string, target: string, summary: string | undefined): string {
  return `${basename(uri)}: ${target} ↔ rewrite${summary ? ` (${summary})` : ""}`;
}

/** `{stem}.{target}.diff` in the server's diff folder (server/features/rewrites.py
 * show_diff) → the stem and target, so the extension can show its own diff instead. */
export function parseServerDiffPath(path: string): { stem: string; target: string } | undefined {
  const match = /kernel-agent-diffs-[^/\\]+[/\\](.+)\.([A-Za-z_][A-Za-z0-9_]*)\.diff$/.exec(path);
  return match ? { stem: match[1], target: match[2] } : undefined;
}
