// The status bar's view of the server's jobs. Pure.

export type JobInfo = {
  jobId: string;
  kind: string;
  uri: string;
  target: string;
  state?: string;
  percent?: number;
  message?: string;
};

/** The best speedup a progress message names ("… · best 1.80x · …"), or undefined. */
export function bestSpeedup(message: string | undefined): number | undefined {
  if (!message) return undefined;
  const match = /best (\d+(?:\.\d+)?)x/.exec(message) ?? /(\d+(?:\.\d+)?)x faster/.exec(message);
  return match ? Number(match[1]) : undefined;
}

/** The status bar item's text and tooltip. `best` is the best speedup seen so far. */
export function statusText(
  jobs: readonly JobInfo[],
  best: number | undefined,
): { text: string; tooltip: string } {
  const speed = best !== undefined && best > 1 ? ` · best ${best.toFixed(2)}x` : "";
  if (jobs.length === 0) {
    return {
      text: `$(rocket) Kernel Agent${speed}`,
      tooltip: speed
        ? `Kernel Agent: no job running; best verified speedup so far ${best!.toFixed(2)}x`
        : "Kernel Agent: no job running",
    };
  }
  const label = jobs.length === 1 ? "1 job" : `${jobs.length} jobs`;
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
