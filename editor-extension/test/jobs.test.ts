import assert from "node:assert/strict";
import { test } from "node:test";
import { bestSpeedup, jobLabel, statusText } from "../src/jobs.ts";

test("the best speedup is read from progress messages", () => {
  assert.equal(bestSpeedup("iteration 3/16 · best 1.80x · 41 candidates"), 1.8);
  assert.equal(bestSpeedup("2.31x faster, verified"), 2.31);
  assert.equal(bestSpeedup("starting"), undefined);
  assert.equal(bestSpeedup(undefined), undefined);
});

test("the status bar shows jobs and the best speedup", () => {
  const job = { jobId: "j1", kind: "optimize", uri: "file:///a.py", target: "Model", percent: 42, message: "iteration 3/16 · best 1.80x" };
  assert.equal(statusText([job], 1.8).text, "$(sync~spin) 1 job · best 1.80x");
  assert.match(statusText([job, { ...job, jobId: "j2", kind: "profile" }], undefined).tooltip, /Profiling Model: 42%/);
  assert.equal(statusText([], undefined).text, "$(rocket) Kernel Agent");
  assert.equal(statusText([], 2.5).text, "$(rocket) Kernel Agent · best 2.50x");
  assert.equal(jobLabel(job), "Optimizing Model: 42% iteration 3/16 · best 1.80x");
});
