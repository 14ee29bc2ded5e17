// The extension's settings → what the language server reads (server/settings.py): the
// same keys under "kernelAgent", nested as VS Code nests them. Pure: no `vscode` import.

/** Settings the server reads, as VS Code spells them under `kernelAgent.` */
export const SERVER_KEYS: readonly string[] = [
  "llm.backend",
  "llm.model",
  "llm.baseUrl",
  ...["planner", "executor", "repairer", "summarizer"].flatMap((role) => [
    `llm.${role}.backend`,
    `llm.${role}.model`,
  ]),
  "device",
  "size",
  "search.beam",
  "search.plans",
  "search.samples",
  "search.iterations",
  "search.patience",
  "search.repairs",
  "search.maxEvals",
  "search.maxCost",
  "search.maxTime",
  "search.timingBudget",
  "search.threads",
  "search.profile",
  "rewriteMode",
  "profileOnSave",
  "memory.path",
  "memory.enabled",
  "jail",
  "evalBackend",
  "rayAddress",
  "maxJobs",
];

/** Settings only the extension reads; never sent to the server. */
export const CLIENT_KEYS: readonly string[] = ["interpreter", "trace.server"];

/** A change to one of these needs a new server process (the rest is re-read live). */
export const RESTART_KEYS: readonly string[] = ["interpreter", "maxJobs"];

export type SettingsObject = { [key: string]: unknown };

/** The server's view of the settings: nested objects, unset values (null, "") left out so
 * the server keeps its own defaults. `get` reads one `kernelAgent.<key>` value. */
export function serverSettings(get: (key: string) => unknown): SettingsObject {
  const out: SettingsObject = {};
  for (const key of SERVER_KEYS) {
    const value = get(key);
    if (value === undefined || value === null) continue;
    if (typeof value === "string" && value.trim() === "") continue;
    if (typeof value === "number" && !Number.isFinite(value)) continue;
    setPath(out, key.split("."), typeof value === "string" ? value.trim() : value);
  }
  return out;
}

function setPath(target: SettingsObject, path: string[], value: unknown): void {
  let node = target;
  for (const part of path.slice(0, -1)) {
    const next = node[part];
    if (typeof next !== "object" || next === null) node[part] = {};
    node = node[part] as SettingsObject;
  }
  node[path[path.length - 1]] = value;
}

/** Whether a configuration change (as `affects("kernelAgent.x")`) needs a restart. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`kernelAgent.${key}`));
}

/** Backends whose API key the extension keeps in SecretStorage, and the environment
 * variable the server reads each from (agents/llm/config.py DEFAULT_KEY_ENV). */
export const KEY_BACKENDS = [
  { backend: "anthropic", label: "Anthropic", env: "ANTHROPIC_API_KEY" },
  { backend: "openai", label: "OpenAI-compatible server", env: "OPENAI_API_KEY" },
] as const;

export type KeyBackend = (typeof KEY_BACKENDS)[number]["backend"];

export function secretName(backend: KeyBackend): string {
  return `kernelAgent.apiKey.${backend}`;
}

/** The server process's environment: the editor's, with the stored keys added (a stored
 * key wins over one inherited from the editor's environment). */
export function serverEnvironment(
  base: { [name: string]: string | undefined },
  keys: Partial<Record<KeyBackend, string | undefined>>,
): { [name: string]: string } {
  const env: { [name: string]: string } = {};
  for (const [name, value] of Object.entries(base)) if (value !== undefined) env[name] = value;
  for (const { backend, env: name } of KEY_BACKENDS) {
    const key = keys[backend]?.trim();
    if (key) env[name] = key;
  }
  env.PYTHONUNBUFFERED = "1";
  return env;
}

/** Any text with the given secrets masked: for lines that go to the output channel. */
export function redact(text: string, secrets: readonly (string | undefined)[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret && secret.length >= 4) out = out.split(secret).join("[redacted]");
  }
  return out;
}
