"""A small job with ``save_token_ids`` against a real server, its token export and its round-trip check: the
part the SGLang and vLLM token tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from tests.engines.pool import LiveServer
from tests.helpers.cli import run_cli, write_job
from tests.helpers.export import prompts_path_reader, speculators_reader

N_SINGLE = 6
N_MULTI = 3
EOS_ID = 2  # <|im_end|> in the tiny models' tokenizer


def write_prompts(tmp: Path) -> Path:
    """Single-turn prompts and two-turn conversations (every user turn regenerated)."""
    rows: list[dict[str, Any]] = [{"id": f"s{i}", "prompt": f"Say something about day {i}."} for i in range(N_SINGLE)]
    rows += [
        {
            "id": f"m{i}",
            "conversations": [
                {"from": "human", "value": f"Name a colour for day {i}."},
                {"from": "gpt", "value": "Blue."},
                {"from": "human", "value": "And another one?"},
            ],
        }
        for i in range(N_MULTI)
    ]
    path = tmp / "prompts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def plain_ascii_bias(model_dir: Path, eos_id: int) -> dict[str, float]:
    """A ``logit_bias`` that keeps the tiny random model to tokens of printable ASCII text, and EOS a little
    favoured: its answers are then text that decodes whole (no partial UTF-8 bytes), some of them stopped."""
    tk = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    bias: dict[str, float] = {}
    for i in range(tk.get_vocab_size()):
        text = tk.decode([i], skip_special_tokens=False)
        if i != eos_id and not (text and all(32 <= ord(c) < 127 for c in text) and "<|" not in text):
            bias[str(i)] = -100.0
    bias[str(eos_id)] = 3.0
    return bias


def run_tokens_job(tmp: Path, server: LiveServer) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Runs the job, exports ``--format tokens`` and runs ``inspect --tokens --json``; returns the exported rows
    (read back through both trainers' readers), the export's counts and the round trip's findings."""
    out = tmp / "out"
    job = write_job(
        tmp / "job.yaml",
        [server.base_url],
        write_prompts(tmp),
        out,
        model=server.model,
        save_token_ids=True,
        sampling={
            "max_tokens": 16,
            "temperature": 1.0,
            "extra_body": {"logit_bias": plain_ascii_bias(server.model_dir, EOS_ID)},
        },
        concurrency=4,
    )
    ran = run_cli("run", str(job), timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    dest = tmp / "prompts.tokens.jsonl"
    exported = run_cli(
        "export", str(out), "--format", "tokens", "--tokenizer", str(server.model_dir), "--to", str(dest)
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    rows = prompts_path_reader(dest)
    assert speculators_reader(dest) == [(r["input_ids"], r["loss_mask"]) for r in rows]
    counts = orjson.loads((tmp / "prompts.tokens.jsonl.counts.json").read_bytes())
    checked = run_cli("inspect", str(out), "--tokens", "--tokenizer", str(server.model_dir), "--json")
    assert checked.returncode == 0, checked.stderr[-3000:]
    text = run_cli("inspect", str(out), "--tokens", "--tokenizer", str(server.model_dir))
    assert text.returncode == 0 and "template round trip" in text.stdout, text.stderr[-3000:]
    (tmp / "inspect.txt").write_text(text.stdout)
    return rows, counts, orjson.loads(checked.stdout)


def assert_findings(rows: list[dict[str, Any]], counts: dict[str, Any], trip: dict[str, Any]) -> None:
    """What both servers do, as found: every row from the server's own ids, a stopped answer's ids ending with
    EOS (supervised), the prompts rendered by the server to the ids the tokenizer's chat template makes, and the
    answers different only where the model sampled a split of its text the tokenizer would not make, or at the
    end of an answer cut at max_tokens (the template closes the turn)."""
    assert counts["written"] == len(rows) == counts["completed"] - sum(counts["left_out"].values())
    assert set(counts["left_out"]) <= {"empty completion"}  # an answer that stopped at once
    assert {r["token_source"] for r in rows} == {"server"} and counts["tokens"]["from_chat_template"] == 0
    assert counts["tokens"]["end_of_turn_added"] == 0  # the server's ids already end with EOS
    stopped = [r for r in rows if r["finish_reason"] == "stop"]
    assert stopped, "no answer stopped: the EOS bias no longer works"
    assert all(r["input_ids"][-1] == EOS_ID and r["loss_mask"][-1] == 1 for r in stopped)
    for r in rows:
        if r["id"].startswith("m"):  # both answers supervised: two runs of 1s
            runs = sum(1 for a, b in zip([0, *r["loss_mask"]], r["loss_mask"], strict=False) if b and not a)
            assert runs == 2, r
    assert trip["without_server_ids"] == 0 and trip["unrenderable"] == 0
    assert trip["checked_turns"] == N_SINGLE + 2 * N_MULTI
    assert "prompt" not in trip["where"] and "end" not in trip["where"], trip
    assert trip["where"].get("completion", 0) == trip["same_text"], trip
    assert trip["differ"] == trip["same_text"] + trip["where"].get("cut", 0)
