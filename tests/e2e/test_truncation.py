"""Nothing cut silently, against simulated servers: answers longer than the default max_tokens are shown as cut on
the status line, in the summary and in ``tokenmill status``, and the doctor names sampling.max_tokens; a
conversation is regenerated turn by turn by default, and ``input.conversation_turns: first`` opts out."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from tests.helpers.cli import read_records, run_cli, write_job, write_prompts
from tokenmill.config import SamplingSpec
from tokenmill.fleet.simprocs import SimProcess

DEFAULT_MAX_TOKENS = SamplingSpec().max_tokens
FAST_DOCTOR = {"scrape_interval_s": 0.2, "event_interval_s": 0.2, "doctor": {"confirm_rounds": 1}}


@pytest.mark.parametrize(
    "fleet",
    [(1, ["--instant", "--output-len-mean", str(3 * DEFAULT_MAX_TOKENS), "--output-len-sigma", "0.3"])],
    indirect=True,
)
def test_answers_longer_than_the_default_max_tokens_are_shown_cut(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = write_prompts(tmp_path / "prompts.jsonl", 60)
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [fleet[0].url], data, out, monitor=FAST_DOCTOR, status_interval_s=0.2)
    spec = yaml.safe_load(job.read_text())
    del spec["sampling"]  # no sampling block: the default max_tokens
    job.write_text(yaml.safe_dump(spec))
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    done, _ = read_records(out)
    cut = sum(1 for r in done if r["finish_reason"] == "length")
    assert len(done) == 60 and cut >= 50  # answers of ~3x the limit: nearly all hit it
    assert all(r["sampling"]["max_tokens"] == DEFAULT_MAX_TOKENS for r in done)
    share = f"{cut / 60 * 100:.1f}%"
    assert f"truncated {share} at max_tokens {DEFAULT_MAX_TOKENS:,}" in res.stderr  # the status line
    row = f"| answers cut at max_tokens | {share} ({cut:,} of 60 answers) at max_tokens {DEFAULT_MAX_TOKENS:,} |"
    assert row in res.stdout  # the summary
    assert row in (out / "summary.md").read_text()
    status = run_cli("status", str(out))
    assert status.returncode == 0, status.stderr
    assert row in status.stdout
    verdicts = [
        v
        for line in (out / "events.jsonl").read_bytes().splitlines()
        if (rec := orjson.loads(line))["kind"] == "verdicts"
        for v in rec["verdicts"]
    ]
    truncated = next(v for v in verdicts if v["rule"] == "truncated")
    evidence = dict(truncated["evidence"])
    assert evidence["sampling.max_tokens in force"] == f"{DEFAULT_MAX_TOKENS:,}"
    assert "sampling.max_tokens" in truncated["advice"] and "--max-tokens" in truncated["advice"]
    suggested = int(truncated["changes"][0].removeprefix("--max-tokens "))
    assert suggested > DEFAULT_MAX_TOKENS
    assert "doctor: answers cut at max_tokens" in res.stderr
    # a trainer at 1,000 tokens cuts every record (answers of ~the whole max_tokens); at their longest, none
    inspect = run_cli("inspect", str(out), "--train-max-length", "1000")
    assert inspect.returncode == 0, inspect.stderr
    assert "train max length 1,000: 60 of 60 records (100.0%) are longer and would be cut" in inspect.stdout
    longest = max(r["prompt_tokens"] + r["completion_tokens"] for r in done)
    inspect = run_cli("inspect", str(out), "--json", "--train-max-length", str(longest))
    assert orjson.loads(inspect.stdout)["train_cut"]["records_cut"] == 0


def test_plan_says_what_a_train_max_length_cuts() -> None:
    res = run_cli("plan", "-m", "qwen3-32b", "-g", "h100", "--no-what-if", "--input-len", "300", "--output-len",
                  "2700", "--train-max-length", "4096", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    cut = orjson.loads(res.stdout)["train_cut"]
    assert cut["max_length"] == 4096 and 0.05 < cut["records"] < 0.5 and 0 < cut["tokens"] < cut["records"]


def _conversations(path: Path, n: int) -> Path:
    with path.open("wb") as f:
        for i in range(n):
            turns = []
            for k in range(1 + i % 3):  # 1, 2 or 3 user turns
                turns += [{"from": "human", "value": f"question {k} of {i}"}, {"from": "gpt", "value": "old answer"}]
            f.write(orjson.dumps({"id": f"c{i}", "conversations": turns}) + b"\n")
    return path


def test_every_user_turn_is_regenerated_by_default_and_first_opts_out(fleet: list[SimProcess], tmp_path: Path) -> None:
    data = _conversations(tmp_path / "convs.jsonl", 30)
    multi = sum(1 for i in range(30) if i % 3)  # rows with 2 or 3 user turns
    out = tmp_path / "out"
    job = write_job(tmp_path / "job.yaml", [s.url for s in fleet], data, out)
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert "conversations: every user turn regenerated" in res.stderr  # the start line
    assert f"| rows with several user turns | {multi:,} of 30 rows: every user turn regenerated" in res.stdout
    done, _ = read_records(out)
    by_id = {r["id"]: r for r in done}
    for i in range(30):
        rec = by_id[f"c{i}"]
        answers = rec["turns"] or [rec]
        assert len(answers) == 1 + i % 3
        assert all(t["completion"] != "old answer" for t in answers)
    # each later turn was sent with the answers generated before it: its prompt holds the earlier turns' tokens
    three = by_id["c2"]["turns"]
    assert three[1]["prompt_tokens"] > three[0]["prompt_tokens"] + three[0]["completion_tokens"] - 1

    first_out = tmp_path / "first"
    job = write_job(tmp_path / "first.yaml", [s.url for s in fleet], data, first_out)
    spec = yaml.safe_load(job.read_text())
    spec["input"]["conversation_turns"] = "first"
    job.write_text(yaml.safe_dump(spec))
    res = run_cli("run", str(job), "--no-live")
    assert res.returncode == 0, res.stderr
    assert f"| rows with several user turns | {multi:,} of 30 rows: only the first user turn answered" in res.stdout
    done, _ = read_records(first_out)
    assert len(done) == 30 and all(not r.get("turns") for r in done)
    assert all(r["prompt"] == [{"role": "user", "content": f"question 0 of {r['id'][1:]}"}] for r in done)
