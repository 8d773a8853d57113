"""``make bench``'s ``tokens`` section: the token export's rate with one worker and with one a core, against the
tokenizer's own encode rate on the same texts, with a Qwen3.6-sized vocabulary (:mod:`bench.vocab`).

The corpus: records of an output directory written here, without server token ids (the chat-template path, the
costly one), each a system turn, a question and an answer of ~2,700 tokens cut from the Python documentation's
prose, the answer's usage counted by the same tokenizer (so the usage check passes, as with the model's own). Three
rates, rows (records) a second, one after the other in this process:

* the tokenizer alone: each record's rendered conversation encoded by the ``tokenizers`` library (one text at a
  time, the texts rendered beforehand: only the encoding is timed);
* ``export --format tokens --workers 1``: the whole export (read, filters, render, encode, mask, write);
* ``--workers N``, N the cores: the same export on every core (process start and tokenizer load included).

Targets: one worker within 80 % of the tokenizer alone; N workers at least 0.8 x N x one worker. Each rate is
also given per CPU second (this process and its workers), with the machine's load average: on a machine other
work shares, the wall-clock rates say what the export got, the CPU rates what it costs.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.vocab import build, prose

RECORDS, QUICK_RECORDS = 2000, 400
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


def tokenizer_alone(out: Path, tokenizer: Path) -> dict[str, Any]:
    """Records a second the tokenizer encodes, on the very texts the export renders."""
    from tokenizers import Tokenizer

    from tokenmill.backends.templating import ChatTemplater
    from tokenmill.export.conversation import whole_conversation
    from tokenmill.storage.corpus import open_corpus

    c0 = _cpu()
    templater = ChatTemplater(tokenizer)
    load = _cpu() - c0  # what every export pays once, before its first row (a spawned worker: once each)
    texts = [templater.render_full(whole_conversation(rec.to_json())) for rec in open_corpus(out).iter_live()]
    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    tokens = 0
    c0, t0 = _cpu(), time.perf_counter()
    for text in texts:
        tokens += len(tok.encode(text, add_special_tokens=False).ids)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return {"records": len(texts), "tokens": tokens, "wall_s": wall, "rows_per_s": len(texts) / wall,
            "cpu_s": cpu, "rows_per_cpu_s": len(texts) / cpu, "load": os.getloadavg()[0],
            "tokenizer_load_cpu_s": load}  # fmt: skip


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


def run(quick: bool) -> dict[str, Any]:
    from tokenmill.export.parallel import cores

    n = QUICK_RECORDS if quick else RECORDS
    tokenizer = build()
    work = Path(tempfile.mkdtemp(prefix="tokenmill-bench-tokens-"))
    try:
        out = work / "out"
        write_corpus(out, n, tokenizer)
        alone = tokenizer_alone(out, tokenizer)
        one = export_rate(out, tokenizer, 1)
        many = export_rate(out, tokenizer, max(2, cores()))
        same = (work / "tokens-1.jsonl").read_bytes() == (work / f"tokens-{many['workers']}.jsonl").read_bytes()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "records": n,
        "vocabulary": 248_320,
        "tokens_per_record": one["tokens"] / max(1, one["rows"]),
        "tokenizer": alone,
        "one_worker": one,
        "n_workers": many,
        "same_rows": same,
        "one_over_tokenizer": one["rows_per_s"] / alone["rows_per_s"],
        "n_over_n_times_one": many["rows_per_s"] / (many["workers"] * one["rows_per_s"]),
        # the same per CPU second: what the work costs, whatever else the machine runs
        "one_over_tokenizer_cpu": one["rows_per_cpu_s"] / alone["rows_per_cpu_s"],
        "n_over_one_cpu": many["rows_per_cpu_s"] / one["rows_per_cpu_s"],
        # one worker's CPU without the tokenizer's one-time load, against the encode alone (which excludes it too)
        "one_over_tokenizer_cpu_steady": one["rows"]
        / (one["cpu_s"] - alone["tokenizer_load_cpu_s"])
        / alone["rows_per_cpu_s"],
    }
