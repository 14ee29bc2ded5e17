// Which command starts the language server. Pure: the file system and the Python
// extension are passed in, so the search is unit-tested without VS Code.

export type ServerCommand = {
  command: string;
  args: string[];
  /** Where the interpreter came from, for the log and the error message. */
  source: "setting" | "python extension" | "PATH";
};

export type Probe = {
  /** Whether the path is an executable file. */
  isExecutable: (path: string) => boolean;
  pathEnv: string | undefined;
  home: string | undefined;
  workspaceFolder: string | undefined;
  platform?: string;
};

/** `~`, `${userHome}` and `${workspaceFolder}` in a setting's path. */
export function expandPath(value: string, probe: Pick<Probe, "home" | "workspaceFolder">): string {
  let out = value.trim();
  if (probe.home) {
    out = out.replace(/^~(?=$|[\\/])/, probe.home).replace(/\$\{userHome\}/g, probe.home);
  }
  if (probe.workspaceFolder) out = out.replace(/\$\{workspaceFolder\}/g, probe.workspaceFolder);
  return out;
}

/** The first `name` on PATH that is executable, or undefined. */
export function findOnPath(name: string, probe: Probe): string | undefined {
  const windows = (probe.platform ?? "linux") === "win32";
  const sep = windows ? ";" : ":";
  const names = windows ? [`${name}.exe`, `${name}.cmd`, name] : [name];
  for (const dir of (probe.pathEnv ?? "").split(sep)) {
    if (!dir) continue;
    for (const candidate of names) {
      const path = `${dir.replace(/[\\/]+$/, "")}${windows ? "\\" : "/"}${candidate}`;
      if (probe.isExecutable(path)) return path;
    }
  }
  return undefined;
}

/** The server's command: `kernelAgent.interpreter`, else the Python extension's selected
 * interpreter, else `kernel-agent` on PATH, else `python3` (or `python`) on PATH. */
export function chooseServerCommand(
  setting: string | undefined,
  pythonExtension: string | undefined,
  probe: Probe,
): ServerCommand | undefined {
  const serve = ["-m", "server", "--stdio"];
  if (setting && setting.trim()) {
    const path = expandPath(setting, probe);
    const resolved = /[\\/]/.test(path) ? path : (findOnPath(path, probe) ?? path);
    return { command: resolved, args: serve, source: "setting" };
  }
  if (pythonExtension && pythonExtension.trim()) {
    return { command: pythonExtension.trim(), args: serve, source: "python extension" };
  }
  const cli = findOnPath("kernel-agent", probe);
  if (cli) return { command: cli, args: ["serve"], source: "PATH" };
  for (const name of ["python3", "python"]) {
    const found = findOnPath(name, probe);
    if (found) return { command: found, args: serve, source: "PATH" };
  }
  return undefined;
}

/** The command that checks the environment before the server starts: it must import the
 * server package (one clear error instead of a crashing client). */
export function checkCommand(server: ServerCommand): { command: string; args: string[] } {
  if (server.args[0] === "serve") return { command: server.command, args: ["serve", "--help"] };
  return { command: server.command, args: ["-c", "import server.app"] };
}

/** One line saying what is wrong, from a failed check's output. */
export function explainFailure(server: ServerCommand | undefined, output: string): string {
  if (server === undefined) {
    return "no Python interpreter found (kernelAgent.interpreter is empty, the Python extension has none selected, and neither kernel-agent nor python3 is on PATH)";
  }
  const where = `${server.command} (from ${server.source})`;
  const missing = /No module named '([^']+)'/.exec(output);
  if (missing) return `${where} cannot import '${missing[1]}': kernel-agent is not installed there`;
  if (/ENOENT|No such file/i.test(output)) return `${where} does not exist`;
  if (/EACCES|permission denied/i.test(output)) return `${where} is not executable`;
  const last = output.trim().split(/\r?\n/).filter(Boolean).pop();
  return `${where} failed${last ? `: ${last.slice(0, 200)}` : ""}`;
}
