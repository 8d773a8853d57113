# tokenmill — every target installs what it needs from scratch on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

.PHONY: demo test check lint typecheck unit bench clean venv system-deps

include engine.mk
include sglang.mk

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PIP) || $(PYTHON) -m venv --clear $(VENV)  # a venv cut short (no pip yet) is made again
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

demo: venv
	$(VENV)/bin/tokenmill demo

lint: venv
	$(VENV)/bin/ruff check src tests scripts chaos bench engines
	$(VENV)/bin/ruff format --check src tests scripts chaos bench engines

# mypy strict over src/tokenmill, tests, bench and chaos (pyproject.toml's [tool.mypy]): about 2 minutes on two busy
# cores from nothing, a few seconds with its cache (.mypy_cache).
typecheck: venv
	$(VENV)/bin/mypy

unit: venv
	$(VENV)/bin/pytest -q tests/unit

# The fast lane (a laptop, a first CI stage): lint, types and the unit tests, no engine, server or install of them.
check: lint typecheck
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

# Debian packages some tests drive (headless Chromium renders the run report and the live page; Prometheus and
# promtool check the board and the alert rules of observability/); installed only when missing.
system-deps:
	test -x /usr/bin/chromium || (apt-get update && apt-get install -y --no-install-recommends chromium)
	test -x /usr/bin/prometheus -a -x /usr/bin/promtool || \
		(apt-get update && apt-get install -y --no-install-recommends prometheus)

# The whole suite: lint, types, then every test tier (the real vLLM and SGLang CPU engines included), and the share
# of src/tokenmill's lines the unit tier runs, as one line (a report, not a gate). Tracing costs CPU (about 1.5x
# the unit tier's wall time on 2 cores), so only the unit tier is traced; `make test COVERAGE=` runs it without.
# Both parts run even when the first fails, so one run shows every failure.
COVERAGE ?= --cov=tokenmill --cov-report=
test: venv system-deps engine engine-model sglang sglang-models lint typecheck
	@unit=0; rest=0; \
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=5 $(COVERAGE) tests/unit || unit=$$?; \
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=15 --ignore=tests/unit tests || rest=$$?; \
	test -z "$(COVERAGE)" || echo "coverage: $$($(VENV)/bin/coverage report --format=total)% of src/tokenmill's lines run by the unit tier"; \
	test $$unit -eq 0 -a $$rest -eq 0

# The twin's timing-sensitive tests beside two CPU hogs (tests/e2e/test_busy_machine.py; a few minutes).
.PHONY: busy-check
busy-check: venv sglang sglang-models
	TOKENMILL_BUSY_CHECK=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/e2e/test_busy_machine.py

# Benchmarks (~15 min on 2 cores; see bench/__main__.py): BENCH_SKIP=memory skips the 1M-prompt run,
# BENCH_ONLY=overhead,fleet runs only those sections, BENCH_QUICK=1 is a smoke run. Writes bench/results.json.
bench: venv
	$(PY) -m bench

# The seed-sized job (654,676 prompts, ~7.6 GB) through a SIGKILL and a lost machine, then the post-run tools
# timed (bench/fullsize.py; under an hour on 2 cores). Data in $$BENCH_FULL_DIR (default $$TMPDIR/tokenmill-bench-full,
# ~20 GB free needed); BENCH_QUICK=1 runs 20,000 prompts; FULL_ARGS=--tools-only times the tools again.
.PHONY: bench-full
bench-full: venv
	$(PY) -m bench.fullsize $(FULL_ARGS)

# A few minutes of SIGKILLs, server crashes, HTTP faults, a store outage and a full disk; then verify (chaos/).
.PHONY: chaos
chaos: venv
	$(PY) -m chaos

clean:
	rm -rf $(VENV) tokenmill-demo .pytest_cache .mypy_cache .ruff_cache
