"""docs/drafter.md, run as written: its job file (servers and tokenizer swapped for simulated servers and the tiny
model's tokenizer) and every ``tokenmill`` command of its shell blocks, in order, in a directory laid out as the
page says; the exported rows read back by the two trainers' readers."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from tokenizers import Tokenizer

from tests.helpers.cli import TOKENMILL, read_records
from tests.helpers.export import prompts_path_reader, speculators_reader
from tokenmill.fleet.simprocs import SimProcess

PAGE = Path(__file__).resolve().parents[2] / "docs" / "drafter.md"
TINY = Path(__file__).resolve().parents[2] / ".cache" / "tiny-model"
N_SINGLE, N_MULTI = 50, 10

pytestmark = pytest.mark.skipif(not (TINY / "tokenizer.json").exists(), reason="make tiny-model builds it")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), flags=re.S)


def page_commands() -> list[list[str]]:
    """The page's tokenmill command lines (its bash blocks), split as a shell would."""
    return [shlex.split(line) for b in blocks("bash") for line in b.splitlines() if line.startswith("tokenmill ")]


def page_job(servers: list[str]) -> dict[str, Any]:
    (job,) = [yaml.safe_load(b) for b in blocks("yaml") if b.startswith("# job.yaml")]
    assert job["tokenizer"] == "/models/Qwen3.6-27B" and job["servers"], "the page's job changed: update this test"
    # the simulated servers' token ids are of a made-up vocabulary of their own: the ids are rendered through the
    # tiny model's chat template here (the server-id path runs against real servers in test_tokens_sglang/vllm)
    return {**job, "servers": servers, "tokenizer": str(TINY), "save_token_ids": False}


def write_dataset(path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"id": f"s{i}", "source": "single", "conversations": [{"from": "human", "value": f"Tell me about {i}."}]}
        for i in range(N_SINGLE)
    ]
    rows += [
        {
            "id": f"m{i}",
            "source": "multi",
            "conversations": [
                {"from": "human", "value": f"Name a colour for day {i}."},
                {"from": "gpt", "value": "Blue."},
                {"from": "human", "value": "And why?"},
            ],
        }
        for i in range(N_MULTI)
    ]
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def supervised_runs(mask: list[int]) -> int:
    return sum(1 for a, b in zip([0, *mask], mask, strict=False) if b and not a)


def test_the_drafter_page_runs_as_written(fleet: list[SimProcess], tmp_path: Path) -> None:
    job = page_job([s.url for s in fleet])
    write_dataset(tmp_path / job["input"]["path"])
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    commands = page_commands()
    assert [c[1] for c in commands] == ["run", "inspect", "run", "status", "inspect", "inspect", "export", "export"]
    printed: list[str] = []
    for argv in commands:
        done = subprocess.run(
            [*TOKENMILL, *argv[1:], *(["--no-live"] if argv[1] == "run" else [])],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        printed.append(done.stdout + done.stderr)

    trial = lines(next((tmp_path / "trial").glob("completions_*")))
    assert len(trial) == 40 and not (tmp_path / "trial" / "_SUCCESS").exists()
    assert "train max length 4,096: 0 of 60 records" in printed[4]  # the share a trainer would cut
    assert "no record carries server token ids (60 records without)" in printed[5], printed[5]

    total = N_SINGLE + N_MULTI
    tokens = tmp_path / "prompts.jsonl"
    rows = prompts_path_reader(tokens)  # SpecForge's data.prompts_path rules
    assert speculators_reader(tokens) == [(r["input_ids"], r["loss_mask"]) for r in rows]
    counts = orjson.loads((tmp_path / "prompts.jsonl.counts.json").read_bytes())
    assert counts["completed"] == total and counts["written"] == len(rows)
    assert len(rows) + sum(counts["left_out"].values()) == total  # nothing left out unsaid
    assert f"wrote {len(rows)} of {total} completed records" in printed[6]
    assert all(len(r["input_ids"]) <= 4096 and 1 in r["loss_mask"] for r in rows)
    assert all(supervised_runs(r["loss_mask"]) == (2 if r["id"].startswith("m") else 1) for r in rows)
    assert all(r["token_source"] == "template" for r in rows)
    tk = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    answers = {r["id"]: r for r in read_records(tmp_path / "out")[0]}
    for row in rows:
        assert max(row["input_ids"]) < tk.get_vocab_size()
        if row["id"].startswith("s"):  # what is supervised is the answer and its end of turn, nothing else
            taught = [t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
            assert tk.decode(taught, skip_special_tokens=False) == answers[row["id"]]["completion"] + "<|im_end|>"

    convos = {r["id"]: r for r in lines(tmp_path / "conversations.jsonl")}
    assert set(convos) <= {f"s{i}" for i in range(N_SINGLE)} | {f"m{i}" for i in range(N_MULTI)}
    for rid, row in convos.items():
        roles = [m["role"] for m in row["conversations"]]
        users = 2 if rid.startswith("m") else 1
        assert roles == ["system", *["user", "assistant"] * users], row
        assert row["conversations"][0]["content"] == job["input"]["system_prompt"]
        assert row["thinking"] is False and row["source"] == ("multi" if rid.startswith("m") else "single")
