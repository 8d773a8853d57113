"""The token export and the chat template round trip against the real SGLang CPU server (0.5.23, the tiny dense
model, ``/v1/chat/completions`` with ``return_token_ids``), single- and two-turn prompts.

Found (``tests/e2e/tokens_job.py: assert_findings``): every prompt's ids (``prompt_token_ids`` on the choice) are
what the tokenizer's chat template makes of the conversation, later turns included (the earlier answer
re-tokenised from its text); a stopped answer's ``response_token_ids`` end with EOS (``<|im_end|>``); an answer
cut at max_tokens ends without it, which the template adds; and an answer whose ids differ from the template's
decodes to the same text: the model sampled a split the tokenizer would not make (in one run: 5 of 12 answers
differed, 1 inside an answer, 4 cut answers).
"""

from __future__ import annotations

from pathlib import Path

from tests.engines.pool import LiveServer
from tests.helpers.tokens_job import assert_findings, run_tokens_job


def test_sglang_token_export_and_round_trip(tmp_path: Path, sglang_dense: LiveServer) -> None:
    rows, counts, trip = run_tokens_job(tmp_path, sglang_dense)
    assert_findings(rows, counts, trip)
