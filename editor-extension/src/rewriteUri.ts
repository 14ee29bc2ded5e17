// URIs of the read-only documents a rewrite's diff shows, and of the diff the server asks a
// client to show (window/showDocument, to a client that declared
// `experimental.kernelAgent.rewriteUri`; server/rewrite_diff.py builds the same URIs):
//
//   kernel-agent-rewrite:/<stem> (<target>, current|rewrite)<ext>?<query>
//
// The path is a label (the tab's title; its extension picks the language). The query, once
// percent-decoded like any URI component, is form-encoded: `uri` (the document's URI),
// `target` (the target's name), `side` (`original`: the document now, `rewritten`: as
// accepting would leave it).

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

/** The reference a `kernel-agent-rewrite:` URI string carries (as the server sends it in
 * window/showDocument: percent-encoded), or undefined for any other URI. */
export function parseRewriteUriString(text: string): RewriteRef | undefined {
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):[^?#]*\?([^#]*)/.exec(text);
  if (!match) return undefined;
  try {
    return parseRewriteUri({ scheme: match[1], query: decodeURIComponent(match[2]) });
  } catch {
    return undefined; // a malformed percent-encoding
  }
}
