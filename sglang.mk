# The real SGLang server for the test suite: sglang 0.5.23 on the CPU, in its own virtualenv, with the
# project's stand-in for its kernel library (engines/sglang_cpu/), plus tiny dense and hybrid GDN models
# built locally. Included by the main Makefile; also usable alone: `make -f sglang.mk sglang`.
#
#   sglang         build .sglang-venv (only when missing or when the pins, requirements or lock change)
#   sglang-models  build the tiny dense and hybrid models (each skipped when complete)
#   sglang-test    run the tests that need a real SGLang server
#
# The install: torch 2.14.1 (the one sglang 0.5.23 pins; a CUDA build that runs without a GPU) and
# torchvision, sglang's requirements minus the GPU-only ones (engines/sglang_cpu/requirements.txt), then
# sglang itself with --no-deps (its wheel also requires CUDA kernel packages). The resolved versions are kept
# in sglang-constraints.txt, so a new machine builds the same environment.

SGLANG_PYTHON    ?= python3.11
SGLANG_VENV      ?= .sglang-venv
SGLANG_PIN       := sglang==0.5.23
SGLANG_REQS      := engines/sglang_cpu/requirements.txt
SGLANG_LOCK      := sglang-constraints.txt
SGLANG_VPY       := $(SGLANG_VENV)/bin/python
SGLANG_VPIP      := $(SGLANG_VPY) -m pip
TINY_DENSE_DIR   ?= .cache/tiny-model
TINY_HYBRID_DIR  ?= .cache/tiny-hybrid

SGLANG_KEY_CMD   := { echo '$(SGLANG_PIN)'; cat $(SGLANG_REQS) $(SGLANG_LOCK) 2>/dev/null; } | sha1sum | cut -c1-12
SGLANG_STAMP     := $(SGLANG_VENV)/.sglang-$(shell $(SGLANG_KEY_CMD))

.PHONY: sglang sglang-models sglang-test sglang-clean

sglang: $(SGLANG_STAMP)

$(SGLANG_STAMP):
	@set -e; start=$$(date +%s); log=$(SGLANG_VENV)/install.log; \
	pip_q() { $(SGLANG_VPIP) "$$@" >>"$$log" 2>&1 || { \
	  tail -n 40 "$$log"; echo "sglang: 'pip $$*' failed; full log in $$log" >&2; exit 1; }; }; \
	rm -rf $(SGLANG_VENV); \
	$(SGLANG_PYTHON) -m venv $(SGLANG_VENV); \
	pip_q install --upgrade pip; \
	if [ -f $(SGLANG_LOCK) ]; then \
	  echo "sglang: installing $(SGLANG_REQS) with -c $(SGLANG_LOCK) (log: $$log)"; \
	  pip_q install -c $(SGLANG_LOCK) -r $(SGLANG_REQS); \
	else \
	  echo "sglang: installing $(SGLANG_REQS) (log: $$log); writing the resolved versions to $(SGLANG_LOCK)"; \
	  pip_q install -r $(SGLANG_REQS); \
	  { echo "# Resolved SGLang CPU environment (pip freeze after installing $(SGLANG_REQS))."; \
	    echo "# Regenerate: delete this file and run 'make sglang'."; \
	    $(SGLANG_VPIP) freeze | grep -v '^sglang=='; } > $(SGLANG_LOCK); \
	fi; \
	pip_q install --no-deps $(SGLANG_PIN); \
	SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=engines/sglang_cpu $(SGLANG_VPY) -c \
	  "import sglang, torch, sgl_kernel; print('sglang:', sglang.__version__, 'torch', torch.__version__)"; \
	touch "$(SGLANG_VENV)/.sglang-$$($(SGLANG_KEY_CMD))"; \
	echo "sglang: ready in $$(( $$(date +%s) - start )) s, venv size $$(du -sh $(SGLANG_VENV) | cut -f1)"

sglang-models: sglang
	$(SGLANG_VPY) scripts/build_tiny_model.py $(TINY_DENSE_DIR)
	$(SGLANG_VPY) scripts/build_tiny_model.py --kind hybrid $(TINY_HYBRID_DIR)

# `make test` runs the SGLang tests too; a missing SGLang environment there is a failure, not a skip.
test: export TOKENMILL_REQUIRE_SGLANG := 1

sglang-test: venv sglang sglang-models
	TOKENMILL_REQUIRE_SGLANG=1 .venv/bin/pytest -q -p no:cacheprovider -m sglang tests

sglang-clean:
	rm -rf $(SGLANG_VENV) $(TINY_HYBRID_DIR)
