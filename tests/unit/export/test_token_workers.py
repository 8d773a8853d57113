"""``export --format tokens`` on every core, and checked against the servers' token counts, as a user runs it (the
CLI on an output directory, the tiny model's 512-token vocabulary as the tokenizer)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from tests.helpers.factories import completion
from tokenmill.cli import cli
from tokenmill.export import parallel
from tokenmill.export.tokens import TokenCounts, TokenOptions
from tokenmill.output import OutputDir
from tokenmill.storage.corpus import open_corpus

pytest.importorskip("transformers")
from tokenmill.backends.templating import ChatTemplater

TINY = Path(__file__).resolve().parents[3] / ".cache" / "tiny-model"
pytestmark = pytest.mark.skipif(not (TINY / "tokenizer.json").exists(), reason="make tiny-model builds it")

SYSTEM = {"role": "system", "content": "be brief"}
# words the tiny vocabulary never saw: it spells them out in pieces, where the model's large vocabulary has them whole
RARE = "photosynthesis converts electromagnetic radiation into chemical energy within chloroplasts"


def write_out(tmp_path: Path, records: list[Any]) -> Path:
    out = tmp_path / "out"
    od = OutputDir(out, shard_size=16)
    od.open()
    for rec in records:
        od.write(rec)
    od.close(seal=True)
    return out


def tokenmill(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: its exit code and what it prints (an error is exit 2, never a traceback)."""
    return subprocess.run([sys.executable, "-m", "tokenmill", *args], capture_output=True, text=True, timeout=300)


def export_cli(out: Path, dest: Path, *args: str) -> Any:
    return CliRunner().invoke(
        cli, ["export", str(out), "--format", "tokens", "--tokenizer", str(TINY), "--to", str(dest), *args]
    )


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_n_workers_write_the_same_rows_and_counts_as_one(tmp_path: Path, method: str, monkeypatch: Any) -> None:
    monkeypatch.setattr(parallel, "start_method", lambda: method)  # forked with the tokenizer, or spawned anew
    n = parallel.BATCH * 2 + 5  # three batches: the pool is started
    records = [
        completion(
            f"r{i}",
            prompt=[SYSTEM, {"role": "user", "content": f"question {i} about the world"}],
            completion=" ".join(["the way of the world is long"] * (1 + i % 7)),
            finish_reason="length" if i % 5 == 0 else "stop",
            fields={"label": i},
        )
        for i in range(n)
    ]
    records[3] = completion("empty", completion="  ")  # left out by the export's filter, in the main process
    out = write_out(tmp_path, records)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    first = export_cli(out, one, "--workers", "1", "--keep-fields", "label", "--max-length", "40")
    cores = parallel.cores()  # the default: one worker a core (on a machine of one core, ask for two)
    more = [] if cores >= 2 else ["--workers", "2"]
    second = export_cli(out, two, *more, "--keep-fields", "label", "--max-length", "40")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert one.read_bytes() == two.read_bytes()
    assert len(one.read_bytes().splitlines()) == n - 1
    counts = [orjson.loads((tmp_path / f"{name}.jsonl.counts.json").read_bytes()) for name in ("one", "two")]
    assert (counts[0]["tokens"].pop("workers"), counts[1]["tokens"].pop("workers")) == (1, max(cores, 2))
    counts[0].pop("source"), counts[1].pop("source")
    assert counts[0] == counts[1]
    assert counts[0]["tokens"]["rows_cut"] > 0 and counts[0]["left_out"] == {"empty completion": 1}


def test_the_workers_are_started_before_the_reader_starts_threads(tmp_path: Path, monkeypatch: Any) -> None:
    """A job with a remote prefix reads its shards on threads: the pool's start method is chosen, and a fork
    pool's workers forked, before the first record is read (a fork beside threads is refused, and spawned workers
    each load the tokenizer again)."""
    events: list[str] = []
    real = parallel.start_method

    def method() -> str:
        chosen = real()
        events.append(f"workers started ({chosen})" if chosen == "spawn" else "method fork")
        return chosen

    monkeypatch.setattr(parallel, "start_method", method)
    n = parallel.BATCH * 2 + 1
    out = write_out(tmp_path, [completion(f"r{i}", completion=f"answer {i}") for i in range(n)])
    done = threading.Event()

    def read() -> Iterator[dict[str, Any]]:  # as the corpus reader does: its threads start with the first record
        events.append(f"read ({len(multiprocessing.active_children())} workers)")
        reader = threading.Thread(target=done.wait)
        reader.start()
        try:
            yield from (rec.read_json() for rec in open_corpus(out).iter_live())
        finally:
            done.set()
            reader.join()

    job = parallel.TokenJob(TokenOptions(str(TINY)), ())
    totals = TokenCounts()
    lines = b"".join(parallel.token_lines(read(), job, 2, totals, lambda why: None, expected=n))
    assert events[0] in ("method fork", "workers started (spawn)") and events[1].startswith("read")
    if events[0] == "method fork":  # this process ran one thread: the workers were forked before the read
        assert events[1] == "read (2 workers)"
    assert totals.workers == 2 and len(lines.splitlines()) == n == totals.rows


# -- the servers' usage counts -------------------------------------------------------------------------------------


def counted_by_the_model(i: int) -> Any:
    """A record whose usage the server counted with its own (large) vocabulary: about a token a word."""
    text = " ".join([RARE] * (2 + i % 3))
    prompt = [SYSTEM, {"role": "user", "content": f"explain {RARE}"}]
    return completion(
        f"m{i}", prompt=prompt, completion=text, prompt_tokens=24, completion_tokens=len(text.split()) + 1
    )


def counted_by_this_tokenizer(tok: ChatTemplater, i: int) -> Any:
    """A record whose usage is what this very tokenizer counts (the answer and its end-of-turn token)."""
    text = f"the world is long {i}"
    prompt = [SYSTEM, {"role": "user", "content": f"question {i}"}]
    rendered = len(tok.encode(tok.render_full(prompt, generation_prompt=True)))
    return completion(
        f"t{i}", prompt=prompt, completion=text, prompt_tokens=rendered, completion_tokens=len(tok.encode(text)) + 1
    )


def test_a_tokenizer_that_is_not_the_model_s_is_named_with_the_numbers(tmp_path: Path) -> None:
    out = write_out(tmp_path, [counted_by_the_model(i) for i in range(12)])
    dest = tmp_path / "tokens.jsonl"
    result = export_cli(out, dest, "--workers", "1")
    assert result.exit_code == 0, result.output
    warning = result.stderr
    assert f"warning: the tokenizer {TINY} disagrees with the servers' token counts on 12 of 12 records" in warning
    assert "It is likely not the model's tokenizer: pass the model's own with --tokenizer DIR" in warning
    assert "m0: " in warning and " rendered, 19 counted (prompt " in warning  # 18 words and the end of turn
    usage = orjson.loads((tmp_path / "tokens.jsonl.counts.json").read_bytes())["tokens"]["usage"]
    assert usage["verdict"] == "disagrees" and usage["compared"] == usage["disagree"] == 12
    assert usage["rendered_completion_tokens"] > 2 * usage["server_completion_tokens"]
    assert "records disagree" in result.stdout  # the counts printed say it too

    strict = tokenmill("export", str(out), "--format", "tokens", "--tokenizer", str(TINY), "--to",
                       str(tmp_path / "strict.jsonl"), "--strict")  # fmt: skip
    assert strict.returncode == 2
    assert "error: the tokenizer" in strict.stderr and "on 12 of 12 records" in strict.stderr
    assert "is left as it was (--strict)" in strict.stderr and not (tmp_path / "strict.jsonl").exists()


def test_the_model_s_own_tokenizer_agrees_and_a_few_odd_records_pass(tmp_path: Path) -> None:
    tok = ChatTemplater(TINY)
    records = [counted_by_this_tokenizer(tok, i) for i in range(60)] + [counted_by_the_model(0)]  # 1 of 61 odd
    out = write_out(tmp_path, records)
    result = export_cli(out, tmp_path / "tokens.jsonl", "--strict", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "disagrees" not in result.output
    usage = orjson.loads((tmp_path / "tokens.jsonl.counts.json").read_bytes())["tokens"]["usage"]
    assert (usage["verdict"], usage["compared"], usage["disagree"]) == ("agrees", 61, 1)
    assert usage["examples"][0]["id"] == "m0"
    # 1 of 61 is more than 1 %
    tight = export_cli(out, tmp_path / "tight.jsonl", "--max-disagree", "0.01", "--workers", "1")
    assert tight.exit_code == 0 and "disagrees with the servers' token counts on 1 of 61 records" in tight.stderr


def test_inspect_tokens_compares_the_counts_too(tmp_path: Path) -> None:
    out = write_out(tmp_path, [counted_by_the_model(i) for i in range(5)])
    result = CliRunner().invoke(cli, ["inspect", str(out), "--tokens", "--tokenizer", str(TINY)])
    assert result.exit_code == 0, result.output
    assert "token counts against the servers' usage: 5 of 5 records disagree" in result.stdout
    assert "warning: the tokenizer" in result.stderr and "on 5 of 5 records" in result.stderr
    strict = tokenmill("inspect", str(out), "--tokens", "--tokenizer", str(TINY), "--strict")
    assert strict.returncode == 2 and "error: the tokenizer" in strict.stderr and "on 5 of 5 records" in strict.stderr
