"""Every change the doctor can propose says whether it changes the model's outputs (one table,
tokenmill.doctor.outputs); those that do are listed apart with the warning in the report, the log line and the
JSON, and the default autotune allow-list holds none of them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.doctor import observe, verdicts
from tokenmill.config import AutotuneSpec
from tokenmill.config.fleet import TUNABLE_FLAGS
from tokenmill.doctor import format_verdicts
from tokenmill.doctor.outputs import EFFECTS, HEADER, WARNING, changes_outputs, flags_of

FIXTURES: tuple[str, ...] = (
    "state_bound_no_buffer",
    "state_bound_extra_buffer",
    "state_pool_full",
    "kv_bound",
    "retractions",
)
FIXTURES += ("scheduler_conservative", "compute_bound", "prefill_heavy", "underfeeding")


@pytest.mark.parametrize(
    ("change", "changes"),
    [
        ("--quantization fp8", True),
        ("--kv-cache-dtype fp8_e4m3", True),
        ("--mamba-ssm-dtype bfloat16", True),
        ("--speculative-accept-threshold-single 0.5", True),
        ("--some-flag-tokenmill-does-not-know 1", True),  # the safe side
        ("--max-running-requests 96", False),
        ("--mem-fraction-static 0.88", False),
        ("--mamba-radix-cache-strategy auto --disable-radix-cache --max-running-requests 725", False),
        ("--schedule-conservativeness 0.3", False),
        ("--chunked-prefill-size 8192", False),
        ("--concurrency 80", False),
        ("bring the server back", False),
    ],
)
def test_the_table_says_which_changes_alter_the_outputs(change: str, changes: bool) -> None:
    assert changes_outputs(change) is changes


def test_every_flag_the_rules_propose_is_in_the_table() -> None:
    found = [v for name in FIXTURES for v in verdicts(observe(name)).values()]
    proposed = {f for v in found for c in v.changes for f in flags_of(c)}
    assert proposed and proposed <= set(EFFECTS), proposed - set(EFFECTS)


def test_the_default_autotune_allow_list_changes_no_outputs() -> None:
    assert set(TUNABLE_FLAGS) <= set(EFFECTS)
    assert not any(EFFECTS[f].changes_outputs for f in AutotuneSpec().allow)
    assert AutotuneSpec().allow_output_changes == []


def test_output_changes_are_listed_apart_with_the_warning_in_the_report_the_line_and_the_json() -> None:
    """fp8 weights were proposed (+32 %) without a word that they change the target's outputs."""
    v = verdicts(observe("compute_bound"))["running-cap"]
    assert v.changes == ("--max-running-requests 64", "--quantization fp8")
    text = format_verdicts([v], 1)
    same, _, apart = text.partition(HEADER)
    assert "--max-running-requests 64" in same and "--quantization fp8" not in same
    assert "--quantization fp8" in apart and "changes the outputs: the weights are rounded" in apart
    body = v.as_dict()
    assert body["changes_outputs"] == [False, True] and body["output_warning"] == WARNING
    fp8_only = replace(v, changes=("--quantization fp8",))
    assert f"-> --quantization fp8 [{WARNING}]" in fp8_only.line()
