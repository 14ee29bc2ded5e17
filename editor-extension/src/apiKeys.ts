// API keys in VS Code's secret storage: read when the server starts (they reach it as its
// environment, never as settings), and set or removed with Kernel Agent: Set API Key.

import * as vscode from "vscode";
import { KEY_BACKENDS, type KeyBackend, secretName } from "./settings.ts";

export async function readKeys(secrets: vscode.SecretStorage): Promise<Partial<Record<KeyBackend, string>>> {
  const keys: Partial<Record<KeyBackend, string>> = {};
  for (const { backend } of KEY_BACKENDS) {
    const key = await secrets.get(secretName(backend));
    if (key) keys[backend] = key;
  }
  return keys;
}

/** Ask which provider and its key; an empty key removes the stored one. The server
 * restarts through `secrets.onDidChange`. */
export async function setApiKey(secrets: vscode.SecretStorage): Promise<void> {
  const stored = await readKeys(secrets);
  const pick = await vscode.window.showQuickPick(
    KEY_BACKENDS.map((b) => ({
      label: b.label,
      description: stored[b.backend] ? "a key is stored" : "",
      detail: `Passed to the server as ${b.env}; kept in VS Code's secret storage, never in settings.`,
      backend: b.backend,
    })),
    { title: "Kernel Agent: Set API Key", placeHolder: "Which provider's key?" },
  );
  if (!pick) return;
  const key = await vscode.window.showInputBox({
    title: `Kernel Agent: ${pick.label} API key`,
    prompt: "Stored in VS Code's secret storage. Leave empty to remove the stored key.",
    password: true,
    ignoreFocusOut: true,
  });
  if (key === undefined) return;
  const name = secretName(pick.backend);
  if (key.trim()) {
    await secrets.store(name, key.trim());
    void vscode.window.showInformationMessage(
      `Kernel Agent: the ${pick.label} key is stored; the server restarts to use it.`,
    );
  } else {
    await secrets.delete(name);
    void vscode.window.showInformationMessage(`Kernel Agent: the ${pick.label} key is removed.`);
  }
}
