"""One binding resource, one rule, every view: the summary (and so ``tokenmill status`` and the report's
summary.json), the dashboard and the doctor's headline name the resource of the first ranked verdict that binds
one; the resource that bound longest during the run, when it is another, is said as that, not as the binding one.
(The summary once said "binding resource: state pool" while its own doctor section said "KV bound".)"""

from __future__ import annotations

from rich.console import Console

from tokenmill.monitor.dashboard import render
from tokenmill.monitor.snapshot import RecordedVerdict, Snapshot, binding_text, binding_verdict
from tokenmill.run.summary import Summary

CUT = RecordedVerdict("truncated", "answers cut at max_tokens", "", "critical", "40% cut", "client", "cut")
KV = RecordedVerdict("kv-bound", "KV bound", "KV cache", "warning", "KV 97%", "4/4 servers", "KV bound (4/4)")
STATE = RecordedVerdict("state-pool-bound", "state-pool bound", "state pool", "warning", "...", "1/4 servers", "...")


def snapshot(*verdicts: RecordedVerdict, longest: str | None = None) -> Snapshot:
    return Snapshot(
        elapsed_s=60.0, done=10, total=100, completed=10, failed=0, skipped=0, retries=0, inflight=2, comp_s=1.0,
        client_tok_s=10.0, eta_s=90.0, servers=[], waiting=False, last_failure=None, verdicts=verdicts,
        binding=longest,
    )  # fmt: skip


def summary(snap: Snapshot) -> Summary:
    return Summary.from_snapshot(snap, output_dir="o", model="m", api="a", recorded=(10, 0), state="running")


def text(snap: Snapshot) -> str:
    console = Console(width=200, record=True)
    console.print(render(snap))
    return console.export_text()


def test_the_summary_the_status_and_the_dashboard_name_the_verdicts_binding_resource() -> None:
    snap = snapshot(CUT, KV, STATE, longest="state pool")
    assert binding_verdict(snap.verdicts) is KV and binding_text(snap.verdicts) == "KV cache (KV bound)"
    s = summary(snap)
    assert s.binding == "KV cache" and s.bound_longest == "state pool"
    md = s.markdown()
    assert "| binding resource | KV cache (KV bound) |" in md
    assert "| bound longest during the run by | state pool |" in md
    again = summary(Snapshot.from_event(snap.to_event()))  # tokenmill status: the same tick read back
    assert (again.binding, again.binding_by) == ("KV cache", "KV bound")
    assert "binding resource: KV cache (KV bound)" in text(snap)


def test_without_a_verdict_that_binds_the_longest_is_said_as_such() -> None:
    s = summary(snapshot(CUT, longest="state pool"))
    assert s.binding == "state pool" and s.bound_longest is None
    assert "| binding resource | state pool (longest during the run) |" in s.markdown()
    assert "binding resource" not in text(snapshot(CUT))
    assert summary(snapshot(CUT)).markdown().count("| binding resource | - |") == 1
