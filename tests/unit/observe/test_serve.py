"""``tokenmill serve``'s state: read from the event logs, re-read when they grow, a prefix fetched again after
refresh_s (an injected clock), and an HTTP server of the page and its state on loopback."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.events import URLS, tick_event, write_events
from tokenmill.errors import OutputError
from tokenmill.monitor.events import EVENT_FORMAT, EVENTS_FILE, EventLog
from tokenmill.observe.serve import PageSource, make_server, read_state


def test_the_state_of_a_finished_run_comes_from_its_event_log(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out")
    st = read_state(out, "t", None)
    assert st["state"] == "finished" and st["partitions"] == []
    assert {s["url"] for s in st["servers"]} == set(URLS)
    assert len(st["history"]["t"]) == 240 and st["history"]["client_tok_s"][30] == 3800.0
    assert [v["rule"] for v in st["verdicts"]] == ["state-pool-bound"]  # the last tick's
    assert st["failures"]["errors"] == {"TransientError": 11}


def test_a_directory_without_an_event_log_is_refused_with_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="holds no event log"):
        read_state(tmp_path, "t", None)


def test_the_source_reads_the_logs_again_when_they_grow_and_refetches_a_prefix(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out", ticks=10, runs=1)
    now = [0.0]
    fetches: list[float] = []

    def refetch() -> tuple[int, int]:
        fetches.append(now[0])
        return (30, 0)

    source = PageSource(out, "t", None, refetch, (0, 0), refresh_s=30.0, clock=lambda: now[0])
    first = json.loads(source.body())
    assert first["state"] == "finished" and len(first["history"]["t"]) == 10 and fetches == []
    log = EventLog(out / EVENTS_FILE, "r9")  # a rerun going on now
    log.write("start", format=EVENT_FORMAT, model="m", servers=list(URLS), total=2000, done_before=30)
    log.write("tick", **tick_event(0, 30))
    log.close()
    now[0] = 31.0
    again = json.loads(source.body())
    assert again["state"] == "running" and fetches == [31.0] and len(again["history"]["t"]) == 11
    assert again["progress"]["done"] == 30  # the counts the prefix records


def test_the_server_serves_the_page_and_its_state(tmp_path: Path) -> None:
    out = write_events(tmp_path / "out", ticks=5, runs=1)
    server = make_server(PageSource(out, "run-1", None), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}/"
        page = urllib.request.urlopen(base, timeout=10).read().decode()
        st = json.loads(urllib.request.urlopen(base + "state.json?x=1", timeout=10).read())
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "nope", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert "state.json" in page and st["title"] == "run-1" and st["state"] == "finished"
    assert missing.value.code == 404
