"""``make bench``'s ``tokens`` section: the token export's rate with one worker and with one a core, against the
tokenizer's own encode rate on the same texts, with a Qwen3.6-sized vocabulary (:mod:`bench.vocab`).

The corpus: records of an output directory written here, without server token ids (the chat-template path, the
costly one), each a system turn, a question and an answer of ~2,700 tokens cut from the Python documentation's
prose, the answer's usage counted by the same tokenizer (so the usage check passes, as with the model's own). Three
rates, rows (records) a second, in this process:

* the tokenizer alone: the ``tokenizers`` library loads the tokenizer (``Tokenizer.from_file``) and encodes each
  record's rendered conversation, one text at a time (the texts rendered beforehand: only the load and the
  encoding are timed; the encoding's own rate is given too);
* ``export --format tokens --workers 1``: the whole export (its tokenizer and chat template loaded, read, filters,
  render, encode, mask, write);
* ``--workers N``, N the cores: the same export on every core (process start and tokenizer load included).

Each side pays its one-time load, as anyone tokenising the texts does: transformers' loader (what the export's
chat template needs) reads the same ``tokenizer.json`` and more, and the difference is counted against the
export. The three are measured in rounds (3; 2 quick), their order reversed each round, and each kind's fastest
round is kept: on a machine other work shares, that work only ever adds time (every round's rate is in the JSON).

Targets: one worker within 80 % of the tokenizer alone; N workers at least 0.8 x N x one worker. Each rate is
also given per CPU second (this process and its workers), with the machine's load average: on a machine other
work shares, the wall-clock rates say what the export got, the CPU rates what it costs; and per CPU second without
either side's load (the rate of a corpus so large its loads do not count, as the seed's 654,676 records).
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.vocab import build, prose

RECORDS, QUICK_RECORDS = 2000, 400
ROUNDS, QUICK_ROUNDS = 3, 2  # each rate measured this many times, the kinds alternating; the best is kept
ANSWER_CHARS = 11_000  # ~2,700 tokens of this prose with the 248K vocabulary


def write_corpus(out: Path, n: int, tokenizer: Path) -> None:
    from tokenizers import Tokenizer

    from tokenmill.backends.templating import ChatTemplater
    from tokenmill.output import OutputDir
    from tokenmill.records import Completion

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    templater = ChatTemplater(tokenizer)
    text = prose()
    rng = random.Random(0)
    od = OutputDir(out, shard_size=500)
    od.open()
    for i in range(n):
        at = rng.randrange(0, len(text) - ANSWER_CHARS)
        answer = text[at : at + ANSWER_CHARS]
        q = rng.randrange(0, len(text) - 300)
        prompt = [{"role": "system", "content": "Answer well."}, {"role": "user", "content": text[q : q + 300]}]
        od.write(
            Completion(
                id=f"r{i:06d}",
                prompt=prompt,
                completion=answer,
                finish_reason="stop",
                prompt_tokens=len(tok.encode(templater.render_full(prompt, generation_prompt=True)).ids),
                completion_tokens=len(tok.encode(answer).ids) + 1,
                model="bench",
                sampling={},
                server="http://127.0.0.1:1",
                latency_s=0.1,
                attempts=1,
                started_at=0.0,
                finished_at=0.1,
            )
        )
    od.close(seal=True)


def rendered_texts(out: Path, tokenizer: Path) -> list[str]:
    """Each record's conversation rendered through the chat template, as the export renders it (not timed)."""
    from tokenmill.backends.templating import ChatTemplater
    from tokenmill.export.conversation import whole_conversation
    from tokenmill.storage.corpus import open_corpus

    templater = ChatTemplater(tokenizer)
    return [templater.render_full(whole_conversation(rec.read_json())) for rec in open_corpus(out).iter_live()]


def tokenizer_alone(texts: list[str], tokenizer: Path) -> dict[str, Any]:
    """Records a second the ``tokenizers`` library alone takes for the very texts the export renders: its own load
    (``Tokenizer.from_file``, what tokenising anything costs first) and one encode a text."""
    from tokenizers import Tokenizer

    c0, t0 = _cpu(), time.perf_counter()
    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    load_wall, load_cpu = time.perf_counter() - t0, _cpu() - c0
    tokens = 0
    c1, t1 = _cpu(), time.perf_counter()
    for text in texts:
        tokens += len(tok.encode(text, add_special_tokens=False).ids)
    enc_wall, enc_cpu = time.perf_counter() - t1, _cpu() - c1
    wall, cpu = load_wall + enc_wall, load_cpu + enc_cpu
    n = len(texts)
    return {"records": n, "tokens": tokens, "wall_s": wall, "rows_per_s": n / wall, "cpu_s": cpu,
            "rows_per_cpu_s": n / cpu, "load_wall_s": load_wall, "load_cpu_s": load_cpu,
            "encode_rows_per_s": n / enc_wall, "encode_rows_per_cpu_s": n / enc_cpu,
            "load": os.getloadavg()[0]}  # fmt: skip


def templater_load(tokenizer: Path) -> dict[str, float]:
    """What loading the tokenizer with its chat template costs the export once (transformers' loader: the same
    ``from_file`` and its own reading of the files), measured apart."""
    from tokenmill.backends.templating import ChatTemplater

    c0, t0 = _cpu(), time.perf_counter()
    ChatTemplater(tokenizer)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu() - c0}


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (the export's workers, once shut down)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def export_rate(out: Path, tokenizer: Path, workers: int) -> dict[str, Any]:
    from tokenmill.export import ExportOptions, export
    from tokenmill.export.tokens import TokenOptions

    dest = out.parent / f"tokens-{workers}.jsonl"
    opts = ExportOptions(format="tokens", tokens=TokenOptions(str(tokenizer)), workers=workers)
    c0, t0 = _cpu(), time.perf_counter()
    counts = export(out, dest, opts)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    assert counts.tokens is not None and not counts.tokens.usage.disagrees, counts.render()
    return {
        "workers": counts.tokens.workers,
        "rows": counts.tokens.rows,
        "tokens": counts.tokens.tokens,
        "wall_s": wall,
        "rows_per_s": counts.tokens.rows / wall,
        "cpu_s": cpu,  # the main process and every worker
        "rows_per_cpu_s": counts.tokens.rows / cpu,
        "load": os.getloadavg()[0],  # the machine's 1-minute load average at the end (2 cores: above 2 is shared)
        "bytes": dest.stat().st_size,
    }


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round that ran fastest: on a shared machine other work only ever adds time."""
    return max(runs, key=lambda r: float(r["rows_per_s"]))


def run(quick: bool) -> dict[str, Any]:
    from tokenmill.export.parallel import cores

    n = QUICK_RECORDS if quick else RECORDS
    tokenizer = build()
    workers = max(2, cores())
    work = Path(tempfile.mkdtemp(prefix="tokenmill-bench-tokens-"))
    runs: dict[str, list[dict[str, Any]]] = {"tokenizer": [], "one": [], "many": []}
    try:
        out = work / "out"
        write_corpus(out, n, tokenizer)
        texts = rendered_texts(out, tokenizer)
        loaded = templater_load(tokenizer)
        steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("tokenizer", lambda: tokenizer_alone(texts, tokenizer)),
            ("one", lambda: export_rate(out, tokenizer, 1)),
            ("many", lambda: export_rate(out, tokenizer, workers)),
        ]
        for k in range(QUICK_ROUNDS if quick else ROUNDS):
            for name, step in steps if k % 2 == 0 else steps[::-1]:  # each kind first and last in turn
                runs[name].append(step())
        same = (work / "tokens-1.jsonl").read_bytes() == (work / f"tokens-{workers}.jsonl").read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    alone, one, many = _best(runs["tokenizer"]), _best(runs["one"]), _best(runs["many"])
    return {
        "records": n,
        "vocabulary": 248_320,
        "rounds": len(runs["one"]),
        "tokens_per_record": one["tokens"] / max(1, one["rows"]),
        "tokenizer": alone,
        "one_worker": one,
        "n_workers": many,
        "rounds_rows_per_s": {k: [round(r["rows_per_s"], 1) for r in v] for k, v in runs.items()},
        "templater_load": loaded,
        "same_rows": same,
        "one_over_tokenizer": one["rows_per_s"] / alone["rows_per_s"],
        "n_over_n_times_one": many["rows_per_s"] / (many["workers"] * one["rows_per_s"]),
        # the same per CPU second: what the work costs, whatever else the machine runs
        "one_over_tokenizer_cpu": one["rows_per_cpu_s"] / alone["rows_per_cpu_s"],
        "n_over_one_cpu": many["rows_per_cpu_s"] / one["rows_per_cpu_s"],
        # without either side's one-time load: the rate of a corpus so large the loads do not count (the seed's)
        "one_over_tokenizer_cpu_steady": n / (one["cpu_s"] - loaded["cpu_s"]) / alone["encode_rows_per_cpu_s"],
    }
