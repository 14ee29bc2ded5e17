import assert from "node:assert/strict";
import { test } from "node:test";
import { SCHEME, diffTitle, parseRewriteUri, parseServerDiffPath, rewriteUriParts } from "../src/rewriteUri.ts";

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

test("the server's unified diff files are recognised", () => {
  assert.deepEqual(parseServerDiffPath("/tmp/kernel-agent-diffs-ab12/13_gemm.Model.diff"), { stem: "13_gemm", target: "Model" });
  assert.equal(parseServerDiffPath("/tmp/other/13_gemm.Model.diff"), undefined);
});
