# The two commands the README promises: `make demo` and `make test`. Each sets up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.kernel-agent-installed

.PHONY: setup demo test test-fast lint format jail bench clean

setup: $(STAMP) jail

# torch==2.13.0 first, so pip takes the local CPU build instead of a multi-GB CUDA one.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

# The OS jail for candidates (bubblewrap). Best effort: without it the verifier still runs,
# with limits only, and says so in every verdict.
jail:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
	      || echo "warning: could not install bubblewrap; candidates will run without the OS jail"; \
	  else \
	    echo "note: install bubblewrap (e.g. apt-get install bubblewrap) to jail candidates"; \
	  fi; }

# The verifier on an honest rewrite and two cheats, then the offline optimizer on an example:
# progress, the profile's hot lines, the diff of the rewrite and its verified speedup.
demo: setup
	$(BIN)/python examples/demo_verify.py
	@mkdir -p .demo
	$(BIN)/kernel-agent optimize examples/gemm_divide_sum_scale.py --max-time 100 \
	  --memory .demo/memory.sqlite3 --output .demo/gemm_divide_sum_scale_optimized.py

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup
	$(BIN)/kernel-agent bench bench/problems --out bench/results-cpu.json --plot bench/speedups-cpu.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
