"""API keys go only to their own servers and never into anything tokenmill writes or prints."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tokenmill.fleet.simprocs import sim_fleet

KEY = "sk-tokenmill-LEAKCHECK-7f3a9c"


def everything_written(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_api_key_never_leaks(tmp_path: Path) -> None:
    os.environ["TOKENMILL_SIM_API_KEY"] = KEY
    try:
        with sim_fleet(2, ["--time-scale", "0.05"], log_dir=tmp_path / "sims") as good:
            os.environ["TOKENMILL_SIM_API_KEY"] = "another-servers-key"
            with sim_fleet(1, ["--time-scale", "0.05"], log_dir=tmp_path / "sims-other") as other:
                data = write_prompts(tmp_path / "in.jsonl", 60)
                out = tmp_path / "out"
                servers = [s.url for s in good] + [other[0].url]
                job = write_job(tmp_path / "job.yaml", servers, data, out, api_key_env="TM_TEST_KEY")
                res = run_cli("run", str(job), "--no-live", "--log-level", "DEBUG", env={"TM_TEST_KEY": KEY})
                assert res.returncode == 0, res.stderr
                done, failed = read_records(out)
                assert len(done) == 60 and not failed
                # the server with another key refused it and was set aside; the others did all the work
                assert {r["server"] for r in done} == {s.url for s in good}
                log = (out / "tokenmill.log").read_text()
                assert "401" in log and other[0].url in log
                verify = run_cli("verify", str(out), "--input", str(job), env={"TM_TEST_KEY": KEY})
                export = run_cli("export", str(out), "--format", "sharegpt", env={"TM_TEST_KEY": KEY})
    finally:
        os.environ.pop("TOKENMILL_SIM_API_KEY", None)
    written = everything_written(tmp_path)
    assert KEY.encode() not in written
    for proc in (res, verify, export):
        assert KEY not in proc.stdout and KEY not in proc.stderr
    # the job file names the variable, never the key
    assert b"TM_TEST_KEY" in (out / "job.json").read_bytes()


def test_missing_key_variable_is_a_clear_error(tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "in.jsonl", 1)
    job = write_job(tmp_path / "job.yaml", ["http://127.0.0.1:9"], data, tmp_path / "out", api_key_env="TM_UNSET_KEY")
    env = {k: v for k, v in os.environ.items() if k != "TM_UNSET_KEY"}
    res = run_cli("run", str(job), "--no-live", env=env)
    assert res.returncode == 2
    assert "TM_UNSET_KEY" in res.stderr and "not set" in res.stderr and "Traceback" not in res.stderr
