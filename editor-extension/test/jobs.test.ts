import assert from "node:assert/strict";
import { test } from "node:test";
import {
  JobBoard,
  SpeedupStatus,
  jobLabel,
  readJobs,
  runningBest,
  searchBest,
  statusText,
  verifiedResult,
} from "../src/jobs.ts";

const SEARCHING = "iteration 3/16 · searching: best 8.50x so far · 41 candidates";

test("the search's running best and a finished job's confirmed result are read apart", () => {
  assert.equal(searchBest(SEARCHING), 8.5);
  assert.equal(searchBest("8.35x faster, verified"), undefined);
  assert.equal(searchBest("starting"), undefined);
  assert.equal(searchBest(undefined), undefined);
  assert.deepEqual(verifiedResult("8.35x faster, verified"), { summary: "8.35x faster, verified", speedup: 8.35 });
  assert.deepEqual(verifiedResult("cancelled · 2.31x faster, verified, not re-measured"), {
    summary: "2.31x faster, verified, not re-measured",
    speedup: 2.31,
  });
  assert.equal(verifiedResult(SEARCHING), undefined);
  assert.equal(verifiedResult("finished · 8.35x faster · 41 candidates"), undefined); // not yet the job's end
  assert.equal(verifiedResult("no improvement"), undefined);
});

test("the status bar shows the finished speedup, not a higher running best", () => {
  const status = new SpeedupStatus();
  const token = "kernel-agent/j1";
  const job = { jobId: "j1", kind: "optimize", uri: "file:///a.py", target: "Model", percent: 60, message: SEARCHING };
  status.progress(token, { kind: "begin", title: "Optimizing `Model`", message: "starting" });
  status.progress(token, { kind: "report", message: SEARCHING });
  const running = statusText([job], status.verified);
  assert.equal(running.text, "$(sync~spin) 1 job · searching: best 8.50x so far");

  status.progress(token, { kind: "report", message: "finished · 8.35x faster · 41 candidates" });
  status.progress(token, { kind: "end", message: "8.35x faster, verified" });
  const done = statusText([], status.verified);
  assert.equal(done.text, "$(rocket) Kernel Agent · 8.35x faster, verified");
  assert.ok(!done.text.includes("8.50") && !done.tooltip.includes("8.50"), done.tooltip);
  assert.equal(done.tooltip, "Kernel Agent: no job running; the last search's kernel (`Model`): 8.35x faster, verified");

  // the next search's result replaces it as it is, lower or none, and a profile leaves it
  status.progress("kernel-agent/j2", { kind: "begin", title: "Optimizing `add`" });
  status.progress("kernel-agent/j2", { kind: "end", message: "1.20x faster, verified" });
  assert.equal(statusText([], status.verified).text, "$(rocket) Kernel Agent · 1.20x faster, verified");
  status.progress("kernel-agent/j3", { kind: "begin", title: "Profiling `add`" });
  status.progress("kernel-agent/j3", { kind: "end", message: "profiled: 3 hot lines" });
  assert.equal(status.verified?.speedup, 1.2);
  status.progress("kernel-agent/j4", { kind: "begin", title: "Optimizing `add`" });
  status.progress("kernel-agent/j4", { kind: "end", message: "no improvement" });
  assert.equal(statusText([], status.verified).text, "$(rocket) Kernel Agent");
});

test("the status bar lists jobs with the running searches' best, labelled as the search's", () => {
  const job = { jobId: "j1", kind: "optimize", uri: "file:///a.py", target: "Model", percent: 42, message: "iteration 3/16 · searching: best 1.80x so far" };
  const other = { ...job, jobId: "j2", message: SEARCHING };
  assert.equal(runningBest([job, other]), 8.5);
  assert.equal(statusText([job], undefined).text, "$(sync~spin) 1 job · searching: best 1.80x so far");
  assert.match(statusText([job, { ...job, jobId: "j2", kind: "profile" }], undefined).tooltip, /Profiling Model: 42%/);
  assert.equal(statusText([{ ...job, message: "starting" }], undefined).text, "$(sync~spin) 1 job");
  assert.equal(statusText([], undefined).text, "$(rocket) Kernel Agent");
  assert.equal(jobLabel(job), "Optimizing Model: 42% iteration 3/16 · searching: best 1.80x so far");
});

const JOB = { jobId: "j1", kind: "optimize", uri: "file:///a.py", target: "Model", percent: 0, message: "starting" };

test("a jobsChanged push and a kernelAgent.jobs answer read the same jobs; anything else is no list", () => {
  assert.deepEqual(readJobs({ jobs: [JOB] }), [JOB]);
  assert.deepEqual(readJobs([JOB]), [JOB]);
  assert.deepEqual(readJobs({ jobs: [] }), []);
  assert.deepEqual(readJobs({ jobs: [JOB, { jobId: 3 }, null, "x"] }), [JOB]); // a malformed entry is dropped
  assert.equal(readJobs({}), undefined);
  assert.equal(readJobs(null), undefined);
  assert.equal(readJobs({ jobs: "j1" }), undefined);
});

test("the board follows the server's pushes: a job starts, advances and ends", () => {
  const board = new JobBoard();
  assert.deepEqual(board.jobs, []);
  assert.equal(board.pushed({ jobs: [JOB] }), true);
  assert.deepEqual(board.jobs, [JOB]);
  const later = { ...JOB, percent: 40, message: "iteration 2/4" };
  board.pushed({ jobs: [later] });
  assert.equal(statusText(board.jobs, undefined).text, "$(sync~spin) 1 job");
  assert.equal(board.pushed({ nothing: true }), false); // not a list: the board keeps what it had
  assert.deepEqual(board.jobs, [later]);
  board.pushed({ jobs: [] });
  assert.deepEqual(board.jobs, []);
});

test("the answer to the question asked on connect loses to a push that came after it was asked", () => {
  const board = new JobBoard();
  const mark = board.asking();
  board.pushed({ jobs: [] }); // the job ended while the question was on its way
  assert.equal(board.answered(mark, [JOB]), false);
  assert.deepEqual(board.jobs, []);
  const again = board.asking();
  assert.equal(board.answered(again, [JOB]), true);
  assert.deepEqual(board.jobs, [JOB]);
  board.clear(); // the server stopped
  assert.deepEqual(board.jobs, []);
});
