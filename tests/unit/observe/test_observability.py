"""observability/: the board and the rules generated from the metric table, current, and reading only names that
something exports; the exporter serving every row of the table; the alerts tested by promtool."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.watch import URL, watched
from tokenmill.monitor.fleet import ServerView
from tokenmill.monitor.snapshot import ServerRow, Snapshot
from tokenmill.observe.board import PANELS, dashboard, targets
from tokenmill.observe.names import names, unknown_names
from tokenmill.observe.rules import RECORDED, rules
from tokenmill.run.metrics import METRICS, exported_series
from tokenmill.run.prometheus import ClientCollector
from tokenmill.run.watchstate import WatchState

ROOT = Path(__file__).resolve().parents[3]
OBS = ROOT / "observability"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="needs Debian's prometheus package (`make system-deps` installs it)"
)


def test_the_generated_files_are_current() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_observability.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


def rule_exprs() -> list[str]:
    return [r["expr"] for g in rules()["groups"] for r in g["rules"]]


def test_every_query_reads_only_names_that_something_defines() -> None:
    assert unknown_names([t.expr for t in targets()] + rule_exprs()) == {}
    # the check itself: a name no row exports, a counter without _total, and label names are not names
    bad = "sum by (server) (rate(tokenmill_nope_total[5m])) / tokenmill_completions"
    assert unknown_names([bad]) == {bad: {"tokenmill_nope_total", "tokenmill_completions"}}
    assert names('max by (server) (tokenmill_server_up{job="tokenmill_x"})') == {"tokenmill_server_up"}


def test_every_panel_reads_the_table_and_every_recording_rule_is_used() -> None:
    read = set().union(*(names(t.expr) for t in targets()), *(names(e) for e in rule_exprs()))
    # every exported family is on the board or in a rule, save the histograms' sums (their buckets are)
    unused = {m.name for m in METRICS if not set(m.series()) & read}
    assert unused <= {"tokenmill_output_tokens_per_completion", "tokenmill_prompt_tokens",
                      "tokenmill_server_errors", "tokenmill_server_overload_timeouts",
                      "tokenmill_abandoned_output_tokens", "tokenmill_server_usable", "tokenmill_max_tokens",
                      "tokenmill_upload_pending_bytes", "tokenmill_upload_failing",
                      "tokenmill_upload_max_backlog_bytes", "tokenmill_inflight_requests"}, unused  # fmt: skip
    assert set(RECORDED) <= read


def test_the_board_holds_what_grafanas_import_needs() -> None:
    board = dashboard()
    assert board["uid"] == "tokenmill-run" and isinstance(board["schemaVersion"], int) and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = board["panels"]
    assert len(panels) == len(PANELS) and len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0
    titles = " | ".join(p["title"] for p in panels)
    for wanted in ("decode", "expected", "Completions/s", "ETA", "Progress", "queued", "KV and state", "Retractions",
                   "abandoned", "max_tokens", "Upload backlog", "Oldest shard", "Binding", "partition",
                   "SGLang", "vLLM"):  # fmt: skip
        assert wanted in titles, wanted


def test_the_exporter_serves_every_row_of_the_table() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClientCollector(watched()))
    text = generate_latest(registry).decode()
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    for m in METRICS:
        assert set(m.series()) & set(samples), f"{m.name} served no sample"
    assert set(samples) <= exported_series()
    assert samples["tokenmill_binding"].labels == {"resource": "state pool", "rule": "state-pool-bound"}
    assert samples["tokenmill_run_info"].labels == {"run": "run-1", "model": "m", "partition": "3"}
    assert samples["tokenmill_server_expected_decode_tokens_per_second"].value == 1200.0
    assert samples["tokenmill_upload_failing"].value == 1.0 and samples["tokenmill_generation_paused"].value == 1.0


def test_an_unknown_number_is_no_sample() -> None:
    run = watched()
    run.last = None
    run.watch = WatchState(views=(ServerView(URL, None, None, False, "refused"),), max_tokens=2048)
    collector = ClientCollector(run)
    empty = {m.name for m in METRICS if not list(collector.family(m).samples)}
    assert {"tokenmill_eta_seconds", "tokenmill_input_rows", "tokenmill_upload_pending_shards",
            "tokenmill_server_up", "tokenmill_binding", "tokenmill_client_cpu_ratio",
            "tokenmill_server_expected_decode_tokens_per_second"} <= empty  # fmt: skip


@needs_promtool
def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(OBS / "prometheus" / "tokenmill.rules.yml")],
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(rule_exprs())} rules found" in check.stdout
    tests = sorted((OBS / "prometheus" / "tests").glob("*.yml"))
    res = subprocess.run([PROMTOOL, "test", "rules", *map(str, tests)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    tested = "".join(p.read_text() for p in tests)
    for group in rules()["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert f"alertname: {rule['alert']}" in tested, f"no promtool test of {rule['alert']}"


@needs_promtool
def test_promtool_accepts_the_example_scrape_configurations() -> None:
    assert PROMTOOL is not None
    configs = sorted((OBS / "examples").rglob("*.yml"))
    assert len(configs) == 3
    for config in configs:
        if config.parent.name == "kubernetes":
            # Debian's build of Prometheus 2.42 leaves Kubernetes discovery out: only its YAML is read here
            k8s = yaml.safe_load(config.read_text())
            jobs = {j["job_name"]: j for j in k8s["scrape_configs"]}
            assert set(jobs) == {"tokenmill", "tokenmill-servers"}
            labels = {r.get("target_label") for r in jobs["tokenmill"]["relabel_configs"]}
            assert "partition" in labels and (config.parent / k8s["rule_files"][0]).exists()
            continue
        res = subprocess.run([PROMTOOL, "check", "config", config.name], cwd=config.parent, capture_output=True,
                             text=True)  # fmt: skip
        assert res.returncode == 0, f"{config}: {res.stdout}{res.stderr}"


def scrape_cli(tmp_path: Path, *args: str) -> Any:
    from click.testing import CliRunner

    from tokenmill.cli import cli

    job = tmp_path / "job.yaml"
    servers = tmp_path / "servers.txt"
    servers.write_text("http://10.0.0.3:30000\n")
    job.write_text(
        f"input: {{path: {tmp_path / 'in.jsonl'}}}\nservers: [http://10.0.0.1:30000, '10.0.0.2:30001']\n"
        f"servers_file: {servers}\noutput: {{dir: {tmp_path / 'out'}}}\nmonitor: {{metrics_port: 9400}}\n"
    )
    return CliRunner().invoke(cli, ["scrape-config", str(job), *args])


def test_scrape_config_lists_the_exporter_and_every_server_of_the_job(tmp_path: Path) -> None:
    res = scrape_cli(tmp_path, "--interval", "5s")
    assert res.exit_code == 0, res.output
    config = yaml.safe_load(res.output)
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert jobs["tokenmill"]["static_configs"] == [{"targets": ["127.0.0.1:9400"]}]
    servers = jobs["tokenmill-servers"]["static_configs"][0]["targets"]
    assert servers == ["10.0.0.1:30000", "10.0.0.2:30001", "10.0.0.3:30000"]
    assert config["global"]["scrape_interval"] == "5s" and config["rule_files"] == ["tokenmill.rules.yml"]
    parts = scrape_cli(tmp_path, "--exporter", "n0:9400", "--exporter", "n1:9400")
    clients = yaml.safe_load(parts.output)["scrape_configs"][0]["static_configs"]
    assert clients[1] == {"targets": ["n1:9400"], "labels": {"partition": "1"}}


def test_scrape_config_writes_a_partitions_file_discovery_target(tmp_path: Path) -> None:
    target = tmp_path / "3.json"
    res = scrape_cli(tmp_path, "--target", "3", "--exporter", "node07:9400", "--to", str(target))
    assert res.exit_code == 0, res.output
    assert json.loads(target.read_text()) == [{"targets": ["node07:9400"], "labels": {"partition": "3"}}]
    bad = scrape_cli(tmp_path, "--target", "3")
    assert bad.exit_code != 0 and "give its --exporter HOST:PORT once" in str(bad.exception)
    sd = yaml.safe_load(scrape_cli(tmp_path, "--file-sd", "/shared/t").output)
    assert sd["scrape_configs"][0]["file_sd_configs"][0]["files"] == ["/shared/t/*.json"]


@needs_promtool
def test_promtool_accepts_a_written_scrape_configuration(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    (tmp_path / "tokenmill.rules.yml").write_text((OBS / "prometheus" / "tokenmill.rules.yml").read_text())
    res = scrape_cli(tmp_path, "--to", str(tmp_path / "prometheus.yml"))
    assert res.exit_code == 0, res.output
    check = subprocess.run([PROMTOOL, "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                           text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_every_rows_event_log_name_is_a_field_of_the_tick() -> None:
    client = {f.name for f in fields(Snapshot)}
    server = {f.name for f in fields(ServerRow)}
    for m in METRICS:
        if m.tick is None:
            continue
        key = m.tick.removeprefix("servers[].")
        if m.stat is not None and key not in client:
            continue  # a run counter with no field of its own: in the tick's client.counts (test_counters.py)
        assert key in (server if m.tick.startswith("servers[].") else client), f"{m.name}: no tick field {m.tick}"
        assert ("server" in m.labels) == m.tick.startswith("servers[]."), m.name


async def test_the_exporter_and_the_event_log_give_one_number_one_value(tmp_path: Path) -> None:
    """For every row that names its event-log field, the scrape and the tick of the same snapshot agree."""
    import aiohttp

    from tests.helpers.dispatch import prompts
    from tests.helpers.watch import dispatcher, job
    from tokenmill.monitor.events import EVENTS_FILE, read_events
    from tokenmill.run.progress import Tracker
    from tokenmill.run.watch import RunMonitor

    spec = job(tmp_path, metrics_port=0, event_interval_s=0.001)
    (tmp_path / "out").mkdir()
    d = dispatcher(spec, fail_every=4)
    mon = RunMonitor(spec, d, tmp_path / "out", "run1")
    tracker = Tracker(d)
    await mon.start(total=30, done_before=0)
    try:
        assert await d.run(prompts(30))
        tracker.total = 30
        mon.tick(tracker.snapshot(mon.state()))
        assert mon.metrics_url is not None
        async with aiohttp.ClientSession() as session, session.get(mon.metrics_url) as resp:
            body = await resp.text()
    finally:
        await mon.stop(tracker.snapshot(mon.state()), finished=True)
    scraped = {s.name: s for f in text_string_to_metric_families(body) for s in f.samples}
    tick = next(r for r in read_events(tmp_path / "out" / EVENTS_FILE) if r["kind"] == "tick")
    compared = []
    for m in METRICS:
        sample = scraped.get(m.series()[0])
        if m.tick is None or sample is None:
            continue
        if m.tick.startswith("servers[]."):
            row = next(r for r in tick["servers"] if r["url"] == sample.labels["server"])
            logged = row[m.tick.removeprefix("servers[].")]
        else:
            logged = tick["client"].get(m.tick, tick["client"].get("counts", {}).get(m.tick))
        if logged is None:
            continue
        assert float(logged) == pytest.approx(sample.value, rel=1e-3, abs=0.05), m.name
        compared.append(m.name)
    assert len(compared) >= 12 and "tokenmill_retries" in compared and "tokenmill_completions" in compared, compared


@needs_promtool
def test_promtool_finds_nothing_to_lint_in_the_exposition() -> None:
    assert PROMTOOL is not None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClientCollector(watched()))
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=generate_latest(registry), capture_output=True)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()
