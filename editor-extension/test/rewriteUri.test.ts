import assert from "node:assert/strict";
import { test } from "node:test";
import { SCHEME, diffTitle, parseRewriteUri, parseRewriteUriString, rewriteUriParts } from "../src/rewriteUri.ts";

const uri = "file:///work/my%20proj/13_gemm.py";

test("both sides of a diff round-trip through their URI", () => {
  for (const side of ["original", "rewritten"] as const) {
    const parts = rewriteUriParts({ uri, target: "Model", side });
    assert.equal(parts.scheme, SCHEME);
    assert.deepEqual(parseRewriteUri(parts), { uri, target: "Model", side });
  }
});

test("the path names the file and target and keeps the .py extension", () => {
  assert.equal(rewriteUriParts({ uri, target: "Model", side: "rewritten" }).path, "/13_gemm (Model, rewrite).py");
  assert.equal(rewriteUriParts({ uri, target: "add", side: "original" }).path, "/13_gemm (add, current).py");
});

test("other URIs are not rewrites", () => {
  assert.equal(parseRewriteUri({ scheme: "file", query: "uri=x&target=Model&side=original" }), undefined);
  assert.equal(parseRewriteUri({ scheme: SCHEME, query: "uri=x&target=Model&side=left" }), undefined);
  assert.equal(parseRewriteUri({ scheme: SCHEME, query: "target=Model&side=original" }), undefined);
});

test("the diff's title", () => {
  assert.equal(diffTitle(uri, "Model", "1.42x faster, verified"), "13_gemm.py: Model ↔ rewrite (1.42x faster, verified)");
});

// Written by server/rewrite_diff.py's rewrite_uri (tests/unit/test_rewrite_uri.py checks the
// same strings): the server's URIs read back here, so the two sides cannot drift apart.
const FROM_SERVER =
  "kernel-agent-rewrite:/13_gemm%20%28Model%2C%20rewrite%29.py?uri%3Dfile%253A%252F%252F%252Fwork%252Fmy%252520proj%252F13_gemm.py%26target%3DModel%26side%3Drewritten";
const FROM_SERVER_ORIGINAL =
  "kernel-agent-rewrite:/x%20%28fn_1%2C%20current%29.py?uri%3Dfile%253A%252F%252F%252Fwork%252Fa%252526b%252Fx.py%26target%3Dfn_1%26side%3Doriginal";

test("the server's rewrite URIs are read back (a document URI with %20 or & intact)", () => {
  assert.deepEqual(parseRewriteUriString(FROM_SERVER), { uri, target: "Model", side: "rewritten" });
  assert.deepEqual(parseRewriteUriString(FROM_SERVER_ORIGINAL), {
    uri: "file:///work/a%26b/x.py",
    target: "fn_1",
    side: "original",
  });
});

test("other URI strings are not rewrites", () => {
  assert.equal(parseRewriteUriString("file:///tmp/kernel-agent-diffs-ab12/13_gemm.Model.diff"), undefined);
  assert.equal(parseRewriteUriString("kernel-agent-rewrite:/x.py"), undefined);
  assert.equal(parseRewriteUriString("kernel-agent-rewrite:/x.py?%E0%A4%A"), undefined);
  assert.equal(parseRewriteUriString("kernel-agent-rewrite:/x.py?uri%3Da%26target%3DM%26side%3Dleft"), undefined);
});
