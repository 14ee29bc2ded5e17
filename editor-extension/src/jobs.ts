// The status bar's view of the server's jobs. Pure.
//
// One speedup per kernel, said the way the server says it: while a search runs, its progress
// names the search's running best ("searching: best 8.50x so far"), an early measurement
// that the confirmation on fresh inputs may lower; when the job ends, its last message carries
// the result's confirmed figure ("8.35x faster, verified"), the one the code lens and the
// notification show. The status bar shows the first as the search's, and the second as it
// is: never a maximum over the two, which once said "best 8.50x" beside a lens saying 8.35x.

export type JobInfo = {
  jobId: string;
  kind: string;
  uri: string;
  target: string;
  state?: string;
  percent?: number;
  message?: string;
};

/** The server's push of its running jobs (server/running_jobs.py), declared by the client's
 * `experimental.kernelAgent.jobsChanged`: params `{jobs: [...]}`, each as `kernelAgent.jobs`
 * answers. */
export const JOBS_CHANGED = "kernelAgent/jobsChanged";

function isJob(value: unknown): value is JobInfo {
  const job = value as Partial<JobInfo> | null;
  return (
    typeof job === "object" &&
    job !== null &&
    typeof job.jobId === "string" &&
    typeof job.kind === "string" &&
    typeof job.uri === "string" &&
    typeof job.target === "string"
  );
}

/** The jobs of a `kernelAgent.jobs` answer or a `jobsChanged` push, or undefined when it
 * is neither (a malformed entry is dropped, not shown half). */
export function readJobs(value: unknown): JobInfo[] | undefined {
  const list = Array.isArray(value) ? value : (value as { jobs?: unknown } | null)?.jobs;
  return Array.isArray(list) ? list.filter(isJob) : undefined;
}

/**
 * The running jobs as the server last said them. The server pushes the list whenever a job
 * starts, advances or ends, so the client asks only once, when it connects; an answer to
 * that question is dropped when a push arrived after it was asked (the push is as new).
 */
export class JobBoard {
  private list: JobInfo[] = [];
  private pushes = 0;

  get jobs(): readonly JobInfo[] {
    return this.list;
  }

  /** A `jobsChanged` push; false when it carried no job list. */
  pushed(params: unknown): boolean {
    const jobs = readJobs(params);
    if (!jobs) return false;
    this.pushes += 1;
    this.list = jobs;
    return true;
  }

  /** Before asking `kernelAgent.jobs`: the mark to give `answered`. */
  asking(): number {
    return this.pushes;
  }

  /** The answer to a question asked at `mark`; false when it was dropped. */
  answered(mark: number, answer: unknown): boolean {
    const jobs = readJobs(answer);
    if (!jobs || this.pushes !== mark) return false;
    this.list = jobs;
    return true;
  }

  /** The server stopped: no job runs. */
  clear(): void {
    this.list = [];
  }
}

/** A finished search's confirmed figure, in the server's words, and the target it was for. */
export type Verified = { summary: string; speedup: number; target?: string };

/** The search's running best a progress message names ("… · searching: best 1.80x so far · …"). */
export function searchBest(message: string | undefined): number | undefined {
  const match = message ? /searching: best (\d+(?:\.\d+)?)x so far/.exec(message) : null;
  return match ? Number(match[1]) : undefined;
}

/** The confirmed result a job's last message names ("cancelled · 2.31x faster, verified"). */
export function verifiedResult(message: string | undefined): Omit<Verified, "target"> | undefined {
  const match = message ? /(\d+(?:\.\d+)?)x faster, verified(?:, not re-measured)?/.exec(message) : null;
  return match ? { summary: match[0], speedup: Number(match[1]) } : undefined;
}

/** The highest running best among the running optimize jobs (each is the search's own). */
export function runningBest(jobs: readonly JobInfo[]): number | undefined {
  const bests = jobs.map((job) => searchBest(job.message)).filter((b): b is number => b !== undefined);
  return bests.length ? Math.max(...bests) : undefined;
}

/**
 * What the status bar remembers of the jobs' progress: the title each began with, and the
 * last finished search's confirmed result, replaced (not maxed) by the next search's end.
 */
export class SpeedupStatus {
  private readonly titles = new Map<string, string>();
  private last: Verified | undefined;

  /** One work-done progress message of a job (`begin`, `report` or `end`). */
  progress(token: string, params: { kind: string; title?: string; message?: string }): void {
    if (params.kind === "begin") {
      this.titles.set(token, params.title ?? "");
      return;
    }
    if (params.kind !== "end") return;
    const title = this.titles.get(token) ?? "";
    this.titles.delete(token);
    if (title.startsWith("Profiling")) return; // a profile says nothing about speed
    const result = verifiedResult(params.message);
    const target = /`([^`]+)`/.exec(title)?.[1];
    // a search that found nothing also replaces the figure: it is the latest result
    this.last = result ? { ...result, target } : undefined;
  }

  /** The last finished search's confirmed result, as the server worded it. */
  get verified(): Verified | undefined {
    return this.last;
  }
}

/** The status bar item's text and tooltip: the running searches' best, labelled as such,
 * or, with none running, the last finished search's confirmed result. */
export function statusText(jobs: readonly JobInfo[], verified: Verified | undefined): { text: string; tooltip: string } {
  if (jobs.length === 0) {
    const where = verified?.target ? ` (\`${verified.target}\`)` : "";
    return {
      text: `$(rocket) Kernel Agent${verified ? ` · ${verified.summary}` : ""}`,
      tooltip: verified
        ? `Kernel Agent: no job running; the last search's kernel${where}: ${verified.summary}`
        : "Kernel Agent: no job running",
    };
  }
  const label = jobs.length === 1 ? "1 job" : `${jobs.length} jobs`;
  const best = runningBest(jobs);
  const speed = best !== undefined && best > 1 ? ` · searching: best ${best.toFixed(2)}x so far` : "";
  return {
    text: `$(sync~spin) ${label}${speed}`,
    tooltip: jobs.map(jobLabel).join("\n") + "\nClick to list or cancel jobs.",
  };
}

export function jobLabel(job: JobInfo): string {
  const verb = job.kind === "profile" ? "Profiling" : "Optimizing";
  const detail = `${job.percent ?? 0}% ${job.message ?? ""}`.trim();
  return `${verb} ${job.target}: ${detail}`;
}
