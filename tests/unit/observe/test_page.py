"""The live page's state: the bounded timeline, the state built from a snapshot, the sample viewer's tail read."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.helpers.watch import watched
from tokenmill.monitor.page import Timeline, page_html, page_state
from tokenmill.run.viewer import LiveSamples, recent_records, sample_view


def test_the_timeline_stays_bounded_and_keeps_its_ends() -> None:
    snap = watched().last
    line = Timeline(points=10)
    for i in range(101):
        line.add(1000.0 + i, snap)
    line.add(1000.0, snap)  # an older time is no new point
    assert len(line.t) <= 10 and line.t[0] == 1000.0
    assert all(len(v) == len(line.t) for v in line.series.values())
    assert line.as_dict()["eta_s"][0] == 190.0


def test_the_page_state_says_what_the_page_shows() -> None:
    run = watched()
    st = page_state(run.last, Timeline(), title="m -> out", state="running", verdicts=run.state().verdicts,
                    errors={"TransientError": 2})  # fmt: skip
    assert st["progress"]["eta_s"] == 190.0 and st["progress"]["total"] == 100
    assert st["progress"]["binding"] == "state pool (state-pool bound)"
    assert st["servers"][0]["url"] == "http://10.0.0.1:30000"
    assert st["uploads"]["pending"] == 2 and "store error: boom" in st["uploads"]["line"]
    assert st["failures"]["errors"] == {"TransientError": 2}
    assert st["verdicts"][0]["rule"] == "state-pool-bound"
    empty = page_state(None, Timeline(), title="t", state="running")
    assert empty["progress"] is None and empty["servers"] == [] and empty["samples"] == {"recent": [], "worst": {}}


def test_the_page_loads_nothing_from_outside() -> None:
    html = page_html()
    assert 'fetch("state.json"' in html
    assert "http://" not in html and "https://" not in html and "<link" not in html and "src=" not in html


def record(i: int, completion: str, finish: str = "stop") -> bytes:
    return orjson.dumps({"id": f"p{i}", "status": "ok", "completion": completion, "finish_reason": finish,
                         "completion_tokens": len(completion.split())}) + b"\n"  # fmt: skip


def test_the_viewer_reads_whole_records_at_the_end_of_the_newest_shards(tmp_path: Path) -> None:
    (tmp_path / "completions_000000.jsonl").write_bytes(b"".join(record(i, f"answer {i}.") for i in range(50)))
    loop = "the same words again " * 40
    open_shard = b"".join(record(i, f"answer {i}.") for i in range(50, 60)) + record(60, loop, "length")
    (tmp_path / "completions_000001.jsonl.open").write_bytes(open_shard + b'{"id": "p61", "comp')  # a torn line
    recs = recent_records(tmp_path, shards=2, size=1200)  # the sealed shard's tail only: its first line is cut
    ids = [r["id"] for r in recs]
    assert ids[-1] == "p60" and "p61" not in ids and "p0" not in ids and ids == sorted(ids, key=lambda s: int(s[1:]))
    (tmp_path / "completions_p001_000000.jsonl.open").write_bytes(record(900, "another writer's."))
    assert [r["id"] for r in recent_records(tmp_path, partition=1)] == ["p900"]
    assert "p900" not in {r["id"] for r in recent_records(tmp_path)}
    view = sample_view(recs, recent=3)
    assert [e["id"] for e in view["recent"]] == ["p60", "p59", "p58"]
    assert "repetition" in view["recent"][0]["flags"] and view["worst"]["repetition"][0]["id"] == "p60"


async def test_live_samples_are_read_again_only_after_refresh_s(tmp_path: Path) -> None:
    shard = tmp_path / "completions_000000.jsonl.open"
    shard.write_bytes(record(0, "first."))
    now = [0.0]
    live = LiveSamples(tmp_path, None, refresh_s=10.0, clock=lambda: now[0])
    assert [e["id"] for e in (await live.get())["recent"]] == ["p0"]
    shard.write_bytes(record(0, "first.") + record(1, "second."))
    now[0] = 5.0
    assert [e["id"] for e in (await live.get())["recent"]] == ["p0"]
    now[0] = 10.0
    assert [e["id"] for e in (await live.get())["recent"]] == ["p1", "p0"]


async def test_the_metrics_port_serves_the_page_and_its_state(tmp_path: Path) -> None:
    import aiohttp

    from tests.helpers.dispatch import prompts
    from tests.helpers.watch import dispatcher, job
    from tokenmill.run.progress import Tracker
    from tokenmill.run.watch import RunMonitor

    spec = job(tmp_path, metrics_port=0)
    (tmp_path / "out").mkdir()
    d = dispatcher(spec)
    mon = RunMonitor(spec, d, tmp_path / "out", "run1")
    tracker = Tracker(d)
    await mon.start(total=20, done_before=0)
    try:
        assert await d.run(prompts(20))
        tracker.total = 20
        mon.tick(tracker.snapshot(mon.state()))
        assert mon.metrics_url is not None
        root = mon.metrics_url.removesuffix("metrics")
        async with aiohttp.ClientSession() as session:
            async with session.get(root) as resp:
                assert resp.status == 200 and resp.content_type == "text/html"
                assert "state.json" in await resp.text()
            async with session.get(root + "state.json") as resp:
                st = await resp.json()
    finally:
        await mon.stop(tracker.snapshot(mon.state()), finished=True)
    assert st["state"] == "running" and st["progress"]["done"] == 20 and st["progress"]["total"] == 20
    assert [s["url"] for s in st["servers"]] == ["http://127.0.0.1:9"] and st["servers"][0]["completed"] == 20
    assert len(st["history"]["t"]) == 1 and st["history"]["done"] == [20.0]
