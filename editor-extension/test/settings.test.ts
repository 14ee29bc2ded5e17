import assert from "node:assert/strict";
import { test } from "node:test";
import {
  CLIENT_KEYS,
  SERVER_KEYS,
  needsRestart,
  redact,
  serverEnvironment,
  serverSettings,
} from "../src/settings.ts";

const manifest = require("../package.json");
const declared = Object.keys(manifest.contributes.configuration.properties).map((k: string) =>
  k.replace(/^kernelAgent\./, ""),
);

test("every declared setting is either sent to the server or kept by the client", () => {
  assert.deepEqual([...declared].sort(), [...SERVER_KEYS, ...CLIENT_KEYS].sort());
});

test("every declared setting is documented", () => {
  for (const [key, spec] of Object.entries<any>(manifest.contributes.configuration.properties)) {
    assert.ok(spec.description || spec.markdownDescription, `${key} has no description`);
  }
});

test("settings become the nested kernelAgent object the server reads", () => {
  const values: Record<string, unknown> = {
    "llm.backend": "anthropic",
    "llm.model": " claude-sonnet-4-5 ",
    "llm.baseUrl": "",
    "llm.planner.backend": "openai",
    "llm.planner.model": "qwen",
    "llm.executor.backend": "",
    device: "cpu",
    "search.maxEvals": 6,
    "search.timingBudget": 0.3,
    "search.threads": 1,
    "search.beam": null,
    "search.profile": true,
    "memory.path": "/tmp/m.sqlite3",
    rewriteMode: "alongside",
    profileOnSave: false,
    interpreter: "/usr/bin/python3",
  };
  assert.deepEqual(serverSettings((k) => values[k]), {
    llm: { backend: "anthropic", model: "claude-sonnet-4-5", planner: { backend: "openai", model: "qwen" } },
    device: "cpu",
    search: { maxEvals: 6, timingBudget: 0.3, threads: 1, profile: true },
    memory: { path: "/tmp/m.sqlite3" },
    rewriteMode: "alongside",
    profileOnSave: false,
  });
});

test("unset values are left out so the server keeps its defaults", () => {
  assert.deepEqual(serverSettings(() => undefined), {});
  assert.deepEqual(serverSettings((k) => (k === "search.maxCost" ? Number.NaN : null)), {});
});

test("the interpreter and maxJobs restart the server; other keys do not", () => {
  assert.equal(needsRestart((s) => s === "kernelAgent.interpreter"), true);
  assert.equal(needsRestart((s) => s === "kernelAgent.maxJobs"), true);
  assert.equal(needsRestart((s) => s === "kernelAgent.search.maxEvals"), false);
});

test("stored keys reach the server's environment under the names it reads", () => {
  const env = serverEnvironment({ PATH: "/bin", OPENAI_API_KEY: "from-shell", GONE: undefined }, {
    anthropic: " sk-ant-123 ",
    openai: "",
  });
  assert.equal(env.ANTHROPIC_API_KEY, "sk-ant-123");
  assert.equal(env.OPENAI_API_KEY, "from-shell"); // an empty stored key does not erase it
  assert.equal(env.PATH, "/bin");
  assert.ok(!("GONE" in env));
});

test("keys never reach a log line", () => {
  assert.equal(redact("env ANTHROPIC_API_KEY=sk-ant-123 ok", ["sk-ant-123", undefined]), "env ANTHROPIC_API_KEY=[redacted] ok");
});
