"""``export --to URL`` from the command line: the export is written to the URL through the store (S3 on a moto
server on loopback, and ``file://``), its counts beside it, and no local path is ever made of a URL — by export or
any other command that takes an output path (``report --to`` writes to the URL too; the others refuse it, saying
what to do)."""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.cli import TOKENMILL, read_records, write_job, write_prompts
from tests.helpers.s3server import S3, TEST_ENV
from tokenmill.fleet.simprocs import start_sim

PROMPTS = 60


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A finished output directory of PROMPTS records (a run against an instant simulated server)."""
    tmp = tmp_path_factory.mktemp("run")
    sim = start_sim(["--instant"], log_path=tmp / "sim.log")
    try:
        job = write_job(tmp / "job.yaml", [sim.url], write_prompts(tmp / "p.jsonl", PROMPTS), tmp / "out")
        res = subprocess.run([*TOKENMILL, "run", str(job), "--no-live"], capture_output=True, text=True, timeout=120)
    finally:
        sim.stop()
    assert res.returncode == 0, res.stderr
    assert len(read_records(tmp / "out")[0]) == PROMPTS
    yield tmp / "out"


def tm(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI run in ``cwd`` (where a URL made into a local path would land: ./s3:/...)."""
    import os

    return subprocess.run(
        [*TOKENMILL, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env={**os.environ, **(env or {})}
    )


def no_local_url_paths(cwd: Path) -> None:
    made = [p.name for p in cwd.iterdir() if p.name.endswith(":")]
    assert not made, f"a URL was made into a local path: {made}"


def test_export_to_an_s3_url_writes_the_object_and_its_counts_there(out: Path, s3: S3, tmp_path: Path) -> None:
    env = {**TEST_ENV, "AWS_ENDPOINT_URL": s3.endpoint}
    url = f"s3://{s3.bucket}/corpora/train.jsonl"
    res = tm(tmp_path, "export", str(out), "--format", "sharegpt", "--to", url, env=env)
    assert res.returncode == 0, res.stderr
    assert f"{url}: wrote {PROMPTS} of {PROMPTS} completed records" in res.stdout
    assert f"counts in {url}.counts.json" in res.stdout
    rows = [json.loads(line) for line in s3.get("corpora/train.jsonl").splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(f"p{i:05d}" for i in range(PROMPTS))
    counts = json.loads(s3.get("corpora/train.jsonl.counts.json"))
    assert counts["written"] == counts["completed"] == PROMPTS
    assert set(s3.objects()) == {"corpora/train.jsonl", "corpora/train.jsonl.counts.json"}  # no temporary left
    no_local_url_paths(tmp_path)

    # again, as parquet into a prefix (a URL ending in /): the default name there, the earlier object replaced
    res = tm(tmp_path, "export", str(out), "--format", "parquet", "--to", f"s3://{s3.bucket}/corpora/", env=env)
    assert res.returncode == 0, res.stderr
    table = pq.read_table(io.BytesIO(s3.get("corpora/export.parquet.parquet")))
    assert table.num_rows == PROMPTS
    no_local_url_paths(tmp_path)


def test_export_to_a_file_url_writes_the_path_it_names(out: Path, tmp_path: Path) -> None:
    dest = tmp_path / "srv" / "corpora" / "train.jsonl"
    res = tm(tmp_path, "export", str(out), "--format", "specforge", "--to", dest.as_uri())
    assert res.returncode == 0, res.stderr
    assert len(dest.read_text().splitlines()) == PROMPTS
    assert json.loads(dest.with_name("train.jsonl.counts.json").read_text())["written"] == PROMPTS
    assert sorted(p.name for p in dest.parent.iterdir()) == ["train.jsonl", "train.jsonl.counts.json"]
    no_local_url_paths(tmp_path)


def test_an_export_that_cannot_be_written_to_the_url_says_so_and_writes_nothing(
    out: Path, s3: S3, tmp_path: Path
) -> None:
    env = {**TEST_ENV, "AWS_ENDPOINT_URL": s3.endpoint}
    missing = tm(tmp_path, "export", str(out), "--format", "sharegpt", "--to", "s3://no-such-bucket/x.jsonl", env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "s3://no-such-bucket/" in missing.stderr and "wrote" not in missing.stdout, missing.stderr

    url = f"s3://{s3.bucket}/empty.jsonl"
    empty = tm(tmp_path, "export", str(out), "--format", "sharegpt", "--min-tokens", "99999", "--to", url, env=env)
    assert empty.returncode == 2
    assert f"{url} is left as it was" in empty.stderr, empty.stderr
    hf = tm(tmp_path, "export", str(out), "--format", "hf", "--to", f"s3://{s3.bucket}/ds", env=env)
    assert hf.returncode == 2 and "--format hf writes a dataset directory" in hf.stderr, hf.stderr
    bare = tm(tmp_path, "export", str(out), "--format", "sharegpt", "--to", f"s3://{s3.bucket}", env=env)
    assert bare.returncode == 2 and "names no object" in bare.stderr, bare.stderr
    assert s3.objects() == {}
    no_local_url_paths(tmp_path)


def test_report_to_a_url_writes_the_page_and_its_figures_there(out: Path, s3: S3, tmp_path: Path) -> None:
    env = {**TEST_ENV, "AWS_ENDPOINT_URL": s3.endpoint}
    url = f"s3://{s3.bucket}/reports/run-1.html"
    res = tm(tmp_path, "report", str(out), "--to", url, env=env)
    assert res.returncode == 0, res.stderr
    assert f"report written to {url} (figures as PNG in s3://{s3.bucket}/reports/run-1/)" in res.stdout
    objects = s3.objects()
    assert b"<html" in s3.get("reports/run-1.html").lower()
    figures = [k for k in objects if k.startswith("reports/run-1/") and k.endswith(".png")]
    assert figures and all(s3.get(k).startswith(b"\x89PNG") for k in figures)
    assert set(objects) == {"reports/run-1.html", *figures}  # nothing temporary left
    no_local_url_paths(tmp_path)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("run", "{job}", "-o", "s3://b/out/"), "the URL as output.remote"),
        (("run", "{url_job}"), "the URL as output.remote"),
        (("doctor", "--servers", "http://127.0.0.1:9", "--output", "s3://b/out/"), "local output directory"),
        (("sim", "--port-file", "s3://b/port"), "a local file on this machine"),
        (("demo", "--output", "s3://b/demo/"), "a local output directory"),
        (("fleet", "status", "--state-dir", "s3://b/fleet/"), "is kept on this machine"),
    ],
)
def test_every_other_command_refuses_a_url_for_a_local_path(
    out: Path, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    job = write_job(tmp_path / "job.yaml", ["http://127.0.0.1:9"], write_prompts(tmp_path / "p.jsonl", 3), out)
    url_job = write_job(tmp_path / "url.yaml", ["http://127.0.0.1:9"], tmp_path / "p.jsonl", Path("x"))
    url_job.write_text(url_job.read_text().replace("dir: x", "dir: s3://b/out/"))
    given = [a.format(out=out, job=job, url_job=url_job) for a in args]
    res = tm(tmp_path, *given)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert "s3://b/" in res.stderr and said in res.stderr, res.stderr
    no_local_url_paths(tmp_path)
