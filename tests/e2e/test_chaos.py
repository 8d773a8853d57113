"""The chaos harness (``make chaos``) in its quick form, and the detectors it relies on.

The quick run kills the client a few times and injects each fault kind at least once (server crashes, a frozen
server, HTTP faults from the servers and from the proxy, a store outage, a full disk, torn tails, machine losses);
everything must verify at the end. The detector tests show that the harness's own checks can fail.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from chaos import ChaosConfig, run_chaos
from chaos.checks import crash_loop, exactly_once, no_torn_shard
from chaos.client import Start
from chaos.faults import KINDS
from chaos.observe import Invariants, count_records
from chaos.tear import VARIANTS, tear_any


@pytest.mark.timeout(240)
def test_quick_chaos_run_survives_every_fault_kind(tmp_path: Path) -> None:
    cfg = replace(ChaosConfig.quick_run(seed=20260101), workdir=tmp_path / "chaos", json_path=tmp_path / "summary.json")
    report = run_chaos(cfg, log=lambda *_: None)
    assert report.ok, "\n".join(report.failures())
    assert report.kills() >= cfg.kills
    for kind in KINDS:
        if kind not in report.tally.skipped:
            assert report.tally.counts[kind] >= 1, f"{kind} was not injected"
    summary = orjson.loads((tmp_path / "summary.json").read_bytes())
    assert summary["ok"] is True and summary["seed"] == 20260101
    assert {c["name"] for c in summary["checks"]} >= {"verify --input --remote", "exactly once", "no crash loop"}
    assert any(s["ended"] == "exit 0" for s in summary["starts"])


def _record(rid: str) -> bytes:
    return orjson.dumps({"id": rid, "completion": "x"}) + b"\n"


def test_invariants_catch_a_duplicate_and_a_changed_sealed_shard(tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl").write_bytes(_record("a") + _record("b"))
    (tmp_path / "completions_000001.jsonl.open").write_bytes(_record("c") + b'{"id": "d", "compl')
    inv = Invariants()
    inv.check(tmp_path, "first")
    assert inv.violations == []  # a torn last line in the open shard is not a record
    (tmp_path / "completions_000001.jsonl.open").write_bytes(_record("c") + _record("a"))
    (tmp_path / "completions_000000.jsonl").write_bytes(_record("a") + _record("B"))
    inv.check(tmp_path, "second")
    assert any("changed after it was sealed" in v for v in inv.violations)
    assert any("more than once" in v and "'a'" in v for v in inv.violations)


def test_exactly_once_names_missing_duplicated_and_reasonless_records(tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl").write_bytes(_record("a") + _record("a"))
    (tmp_path / "failed.jsonl").write_bytes(orjson.dumps({"id": "b", "error_type": "", "error": ""}) + b"\n")
    check = exactly_once(["a", "b", "c"], tmp_path)
    assert not check.ok
    assert "1 recorded twice" in check.detail and "1 never recorded" in check.detail
    assert "failed without a reason" in check.detail


def test_after_a_machine_loss_the_taken_over_shards_count_and_a_duplicate_with_them_is_seen(tmp_path: Path) -> None:
    remote = {"completions_000000.jsonl": _record("a") + _record("b")}  # at the remote prefix only
    (tmp_path / "offloaded.jsonl").write_bytes(orjson.dumps({"shard": "completions_000000.jsonl"}) + b"\n")
    (tmp_path / "manifest.jsonl").write_bytes(orjson.dumps({"shard": "completions_000000.jsonl", "count": 2}) + b"\n")
    (tmp_path / "completions_000001.jsonl").write_bytes(_record("c"))
    assert count_records(tmp_path) == 3
    assert exactly_once(["a", "b", "c"], tmp_path, remote.get).ok
    assert not exactly_once(["a", "b", "c"], tmp_path).ok  # without the remote's records: two never recorded
    inv = Invariants(fetch=remote.get)
    inv.check(tmp_path, "after the loss")
    assert inv.violations == []
    (tmp_path / "completions_000002.jsonl.open").write_bytes(_record("b"))  # b generated again
    inv.check(tmp_path, "later")
    assert any("more than once" in v and "'b'" in v for v in inv.violations)


def test_no_torn_shard_sees_a_torn_shard_an_open_one_and_an_unlisted_one(tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl").write_bytes(_record("a"))
    (tmp_path / "manifest.jsonl").write_bytes(orjson.dumps({"shard": "completions_000000.jsonl"}) + b"\n")
    assert no_torn_shard(tmp_path).ok
    (tmp_path / "completions_000001.jsonl").write_bytes(_record("b") + b'{"id": "c"')
    (tmp_path / "completions_000002.jsonl.open").write_bytes(_record("d"))
    check = no_torn_shard(tmp_path)
    assert not check.ok
    assert "completions_000001.jsonl ends in a torn line" in check.detail
    assert "open shard(s) left" in check.detail and "lists 1 shards for 2" in check.detail


def test_crash_loop_flags_a_long_silent_start_but_not_an_early_kill() -> None:
    early = Start(0, 0.0, "startup", 10, lived_s=0.5, ended="SIGKILL", records_after=10)
    said = Start(1, 1.0, "run", 10, lived_s=9.0, ended="exit 2", records_after=10, message="error: disk full")
    assert crash_loop([early, said], window_s=5.0).ok
    silent = Start(2, 2.0, "run", 10, lived_s=9.0, ended="SIGKILL", records_after=10)
    check = crash_loop([early, said, silent], window_s=5.0)
    assert not check.ok and "start 2" in check.detail


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_tear_is_a_damage_the_healed_check_sees(variant: str, tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl").write_bytes(_record("a"))
    (tmp_path / "manifest.jsonl").write_bytes(b'{"shard": "completions_000000.jsonl"}\n')
    (tmp_path / "completions_000001.jsonl.open").write_bytes(_record("b") + _record("c"))
    (tmp_path / "failed.jsonl").write_bytes(orjson.dumps({"id": "d", "error_type": "E", "error": "e"}) + b"\n")
    torn = tear_any(tmp_path, random.Random(0), variant, after_start=0)
    assert torn is not None and torn.variant == variant
    assert not torn.healed(tmp_path)
    path = tmp_path / torn.file
    if variant == "manifest-line":
        path.write_bytes(b'{"shard": "completions_000000.jsonl"}\n')
    else:  # what the resume does: cut back to the last whole line
        data = path.read_bytes()
        path.write_bytes(data[: data.rfind(b"\n") + 1])
    assert torn.healed(tmp_path)
