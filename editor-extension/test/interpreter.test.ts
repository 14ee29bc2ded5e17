import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type Probe,
  checkCommand,
  chooseServerCommand,
  expandPath,
  explainFailure,
  findOnPath,
} from "../src/interpreter.ts";

function probe(executables: string[], extra: Partial<Probe> = {}): Probe {
  return {
    isExecutable: (p) => executables.includes(p),
    pathEnv: "/usr/local/bin:/usr/bin",
    home: "/home/me",
    workspaceFolder: "/work/proj",
    ...extra,
  };
}

test("the setting wins, with ~ and ${workspaceFolder} expanded", () => {
  const p = probe(["/usr/bin/python3"]);
  assert.deepEqual(chooseServerCommand("${workspaceFolder}/.venv/bin/python", "/ext/python", p), {
    command: "/work/proj/.venv/bin/python",
    args: ["-m", "server", "--stdio"],
    source: "setting",
  });
  assert.equal(chooseServerCommand("~/venv/bin/python", undefined, p)?.command, "/home/me/venv/bin/python");
  assert.equal(expandPath("${userHome}/x", p), "/home/me/x");
});

test("a bare name in the setting is looked up on PATH", () => {
  assert.equal(chooseServerCommand("python3.12", undefined, probe(["/usr/bin/python3.12"]))?.command, "/usr/bin/python3.12");
});

test("then the Python extension's interpreter", () => {
  const chosen = chooseServerCommand("  ", "/envs/torch/bin/python", probe(["/usr/bin/python3"]));
  assert.equal(chosen?.command, "/envs/torch/bin/python");
  assert.equal(chosen?.source, "python extension");
});

test("then kernel-agent on PATH, then python3", () => {
  assert.deepEqual(chooseServerCommand("", undefined, probe(["/usr/bin/python3", "/usr/local/bin/kernel-agent"])), {
    command: "/usr/local/bin/kernel-agent",
    args: ["serve"],
    source: "PATH",
  });
  assert.equal(chooseServerCommand("", undefined, probe(["/usr/bin/python3"]))?.command, "/usr/bin/python3");
  assert.equal(chooseServerCommand("", undefined, probe(["/usr/bin/python"]))?.command, "/usr/bin/python");
  assert.equal(chooseServerCommand(undefined, undefined, probe([])), undefined);
});

test("PATH lookup skips empty entries and follows Windows' rules there", () => {
  assert.equal(findOnPath("python3", probe(["/usr/bin/python3"], { pathEnv: ":/usr/bin/:" })), "/usr/bin/python3");
  const win = probe(["C:\\Py\\python3.exe"], { pathEnv: "C:\\Py", platform: "win32" });
  assert.equal(findOnPath("python3", win), "C:\\Py\\python3.exe");
});

test("the environment check imports the server package", () => {
  assert.deepEqual(checkCommand({ command: "/py", args: ["-m", "server", "--stdio"], source: "setting" }), {
    command: "/py",
    args: ["-c", "import server.app"],
  });
  assert.deepEqual(checkCommand({ command: "/k", args: ["serve"], source: "PATH" }).args, ["serve", "--help"]);
});

test("failures are explained in one line", () => {
  const server = { command: "/usr/bin/python3", args: ["-m", "server"], source: "PATH" as const };
  assert.match(
    explainFailure(server, "Command failed\nTraceback...\nModuleNotFoundError: No module named 'server'\n"),
    /cannot import 'server': kernel-agent is not installed there/,
  );
  assert.match(explainFailure(server, "spawn /usr/bin/python3 ENOENT"), /does not exist/);
  assert.match(explainFailure(undefined, ""), /no Python interpreter found/);
  assert.ok(!explainFailure(server, "a\nb\nc").includes("\n"));
});
