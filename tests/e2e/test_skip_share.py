"""Skipped rows through the whole CLI: a run that completed nothing is not finished (no ``_SUCCESS``, exit 2, the
first reasons with file:line), and ``input.max_skip_share`` stops a run early once too many rows are skipped,
while a few bad rows never stop a big job."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers.cli import read_records, run_cli, write_job
from tokenmill.fleet.simprocs import SimProcess


def sharegpt(path: Path, n: int, bad: frozenset[int] = frozenset()) -> Path:
    """ShareGPT rows with integer ids; the rows in ``bad`` (0-based) have no conversation."""
    with path.open("wb") as fh:
        for i in range(n):
            row = {"id": 1000 + i, "conversations": [{"from": "human", "value": f"question {i}"}]}
            if i in bad:
                row = {"id": 1000 + i, "text": "no conversation here"}
            fh.write(orjson.dumps(row) + b"\n")
    return path


def skip_job(tmp: Path, fleet: list[SimProcess], data: Path, **inp: object) -> tuple[Path, Path, Path]:
    out, remote = tmp / "out", tmp / "remote"
    job = write_job(
        tmp / "job.yaml",
        [fleet[0].url],
        data,
        out,
        input={"on_bad_row": "skip", **inp},
        output={"remote": remote.as_uri() + "/"},
    )
    return job, out, remote


def skipped_lines(out: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (out / "skipped.jsonl").read_bytes().splitlines()]


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_a_run_whose_every_row_is_skipped_is_not_finished(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = sharegpt(tmp_path / "in.jsonl", 30)  # the job names a wrong id_field: every row is skipped
    job, out, remote = skip_job(tmp_path, fleet, data, id_field="uid", max_skip_share=1.0)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "error: the run completed nothing: 30 of the 30 input rows read were skipped as bad rows" in res.stderr
    assert f"the first: {data}:1: missing id field 'uid'; {data}:2: missing id field 'uid'" in res.stderr
    assert "It is not marked finished (no _SUCCESS)" in res.stderr and "Traceback" not in res.stderr
    assert not (remote / "_SUCCESS").exists()
    assert len(skipped_lines(out)) == 30
    status = run_cli("status", str(out))
    assert status.returncode == 0 and not status.stdout.startswith("finished"), status.stdout


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_max_skip_share_stops_a_run_early_with_examples(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = sharegpt(tmp_path / "in.jsonl", 2000, bad=frozenset(range(0, 2000, 3)))  # a third of the rows are bad
    job, out, remote = skip_job(tmp_path, fleet, data)  # the default share (1%) and skips_allowed (10)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 2, res.stderr
    assert "error: stopped: 11 of the 31 input rows read were skipped as bad rows, more than input.max_skip_share" in (
        res.stderr
    )
    assert f"the first: {data}:1: " in res.stderr and f"; {data}:4: " in res.stderr and f"; {data}:7: " in res.stderr
    assert len(skipped_lines(out)) == 11  # it stopped at the row that tipped it, not at the end of the input
    done, _ = read_records(out)
    assert len(done) <= 20 and not (remote / "_SUCCESS").exists()


@pytest.mark.parametrize("fleet", [(1, [])], indirect=True)
def test_a_few_bad_rows_do_not_stop_a_big_job(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = sharegpt(tmp_path / "in.jsonl", 400, bad=frozenset({0, 1, 2, 50, 399}))  # the first rows among them
    job, out, remote = skip_job(tmp_path, fleet, data)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert len(read_records(out)[0]) == 395 and (remote / "_SUCCESS").exists()
    assert f"5 of the 400 input rows read were skipped as bad rows: the first: {data}:1: " in res.stderr
