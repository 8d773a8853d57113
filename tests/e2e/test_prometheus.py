"""The board and the rules against a real Prometheus: Debian's ``prometheus`` (installed by `make system-deps`)
scrapes a live run's --metrics-port and two twins, every panel query of the generated Grafana board returns data
through Prometheus's HTTP API, and killing a twin fires the server-down alert.

Prometheus cannot take port 0: a free port is picked and handed to it. The rules are the generated ones with
the evaluation interval and ``for:`` short (the for-logic itself is promtool's unit tests'); everything is awaited
by polling with a deadline.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.helpers.cli import FAST_MONITOR, TWIN, start_run, stop_run, write_job
from tests.helpers.waiting import wait_for, wait_for_match
from tokenmill.config.observe import AlertSpec
from tokenmill.fleet.keeper import free_port
from tokenmill.fleet.simprocs import SimProcess, start_sim
from tokenmill.observe.board import targets
from tokenmill.observe.rules import rules
from tokenmill.observe.scrape import scrape_config

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="needs Debian's prometheus package (`make system-deps` installs it)"
)
SCRAPE = "1s"
START_S = 180  # the run's start (servers awaited, the thinking probe, the prefix claimed) on a busy machine


@pytest.fixture
def twins() -> Iterator[list[SimProcess]]:
    """Two twins of Qwen3.6-35B-A3B on an H200 (a hybrid: KV and state pools), at a fifth of real time."""
    procs: list[SimProcess] = []
    try:
        for _ in range(2):
            procs.append(start_sim(["--model", *TWIN, "--time-scale", "0.2", "--log-level", "warning"]))
        yield procs
    finally:
        for p in procs:
            p.stop()


def start_prometheus(tmp_path: Path, exporter: str, servers: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    assert PROMETHEUS is not None
    tmp_path.mkdir(parents=True, exist_ok=True)
    fast = AlertSpec(evaluation_interval=SCRAPE, server_down_for="2s")
    (tmp_path / "tokenmill.rules.yml").write_text(yaml.safe_dump(rules(fast)))
    config = scrape_config(servers, [exporter], interval=SCRAPE)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port("127.0.0.1")
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for("Prometheus to be ready", lambda: _get(f"{url}/-/ready") is not None, 60, 0.2, alive=proc,
             log=tmp_path / "prometheus.log")  # fmt: skip
    return proc, url


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bytes(resp.read())
    except OSError:
        return None


def query(base: str, expr: str) -> list[dict[str, Any]]:
    body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    if body is None:
        return []
    data = json.loads(body)
    assert data["status"] == "success", data
    return list(data["data"]["result"])


def firing(base: str, name: str) -> list[dict[str, Any]]:
    body = _get(f"{base}/api/v1/alerts")
    alerts = json.loads(body)["data"]["alerts"] if body else []
    return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def job_file(tmp_path: Path, servers: list[str]) -> tuple[Path, Path]:
    data = tmp_path / "in.jsonl"
    with data.open("wb") as f:
        for i in range(20_000):
            f.write(orjson.dumps({"id": f"p{i}", "prompt": f"Tell a long story about the number {i}. " * 8}) + b"\n")
    out = tmp_path / "out"
    job = write_job(
        tmp_path / "job.yaml", servers, data, out, concurrency=8, model="qwen3.6-35b-a3b",
        sampling={"max_tokens": 256}, monitor=FAST_MONITOR,
        output={"dir": str(out), "shard_size": 100, "remote": (tmp_path / "remote").as_uri(),
                "upload": {"max_backlog": 50}},
    )  # fmt: skip
    return job, out


def test_every_panel_query_returns_data_and_a_killed_twin_fires_the_alert(
    twins: list[SimProcess], tmp_path: Path
) -> None:
    job, out = job_file(tmp_path, [t.url for t in twins])
    run = start_run(job, "--metrics-port", "0", output=tmp_path / "run.out")
    prom: subprocess.Popen[bytes] | None = None
    try:
        log = out / "tokenmill.log"
        found = wait_for_match("the metrics URL in the log", log, r"metrics for Prometheus at http://(\S+)/metrics",
                               START_S, alive=run)  # fmt: skip
        prom, base = start_prometheus(tmp_path / "prom", found.group(1), [t.url for t in twins])
        wanted = [t.expr for t in targets() if t.always]
        assert len(wanted) >= 30
        missing = wait_for(
            "every panel query of the board to return data",
            lambda: [e for e in wanted if not query(base, e)],
            240, 1.0, done=lambda left: not left, alive=run,
        )  # fmt: skip
        assert missing == []
        progress = float(query(base, "tokenmill:progress")[0]["value"][1])
        assert 0 < progress < 1, progress
        assert {r["metric"]["instance"] for r in query(base, 'up{job="tokenmill-servers"} == 1')} == {
            t.url.removeprefix("http://") for t in twins
        }
        assert firing(base, "TokenmillServerDown") == []
        twins[1].kill()
        alert = wait_for("the server-down alert to fire", lambda: firing(base, "TokenmillServerDown"), 120, 0.5,
                         alive=run)  # fmt: skip
        down = {a["labels"].get("instance") or a["labels"].get("server") for a in alert}
        assert twins[1].url.removeprefix("http://") in down or twins[1].url in down, alert
        assert not {twins[0].url, twins[0].url.removeprefix("http://")} & down
    finally:
        stop_run(run)
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(30)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
