"""``run_job``'s stages unwind what they started: an error at start-up leaves the output directory's writer lock
free, so the same process (a library caller, a test) can run the job again; and where prompt ids come from is
decided once, recorded in ``OUT/job.json`` and kept on resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tokenmill.config import JobSpec, SimSpec
from tokenmill.errors import ConfigError
from tokenmill.run import run_job
from tokenmill.sim import SimServer


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def job(tmp: Path, url: str, rows: Path, **extra: Any) -> JobSpec:
    spec: dict[str, Any] = {
        "input": {"path": str(rows)},
        "servers": [url],
        "output": {"dir": str(tmp / "out")},
        "sampling": {"max_tokens": 8},
        "concurrency": 4,
        "monitor": {"enabled": False},
    }
    for key, value in extra.items():
        spec[key] = {**spec[key], **value} if isinstance(spec.get(key), dict) else value
    return JobSpec.model_validate(spec)


def record_ids(out: Path) -> list[str]:
    return sorted(
        orjson.loads(line)["id"]
        for shard in out.glob("completions_*.jsonl*")
        for line in shard.read_bytes().splitlines()
    )


async def test_a_start_up_error_leaves_the_output_usable_in_the_same_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = write_rows(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"hello {i}"} for i in range(6)])
    monkeypatch.delenv("TOKENMILL_TEST_KEY", raising=False)
    async with SimServer(SimSpec(instant=True)) as sim:
        with pytest.raises(ConfigError, match="TOKENMILL_TEST_KEY"):
            await run_job(job(tmp_path, sim.url, rows, api_key_env="TOKENMILL_TEST_KEY"), live=False)
        first = await run_job(job(tmp_path, sim.url, rows), live=False, install_signals=False)
        assert first.finished
        # an error after the output is open (another job's output) unwinds too
        other = job(tmp_path, sim.url, rows, sampling={"max_tokens": 9})
        with pytest.raises(ConfigError, match="different job"):
            await run_job(other, live=False, install_signals=False)
        again = await run_job(job(tmp_path, sim.url, rows), live=False, install_signals=False)
    assert again.finished and again.summary.completed_this_run == 0
    assert record_ids(tmp_path / "out") == [f"r{i}" for i in range(6)]


async def test_ids_come_from_the_id_column_by_default_and_are_recorded(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "in.jsonl", [{"id": f"q{i}", "prompt": f"hi {i}"} for i in range(5)])
    async with SimServer(SimSpec(instant=True)) as sim:
        result = await run_job(job(tmp_path, sim.url, rows), live=False, install_signals=False)
    assert result.finished
    assert record_ids(tmp_path / "out") == [f"q{i}" for i in range(5)]
    recorded = orjson.loads((tmp_path / "out" / "job.json").read_bytes())["spec"]["input"]["id_field"]
    assert recorded == "id"


async def test_an_input_without_ids_uses_row_indices_and_a_resume_keeps_them(tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "in.jsonl", [{"prompt": f"hi {i}"} for i in range(4)])
    async with SimServer(SimSpec(instant=True)) as sim:
        assert (await run_job(job(tmp_path, sim.url, rows), live=False, install_signals=False)).finished
        assert record_ids(tmp_path / "out") == ["0", "1", "2", "3"]
        # the input gains an id column later: the output keeps the ids it was started with, nothing is redone
        write_rows(rows, [{"id": f"new{i}", "prompt": f"hi {i}"} for i in range(4)])
        again = await run_job(job(tmp_path, sim.url, rows), live=False, install_signals=False)
    assert again.finished and again.summary.completed_this_run == 0
