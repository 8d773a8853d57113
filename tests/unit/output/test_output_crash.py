"""Crash simulation: snapshot the directory mid-run, damage it as a crash can, resume, finish, verify.

A crash can cut any file that was not yet fsynced at any byte (the open shard, the manifest, failed.jsonl,
skipped.jsonl), lose the manifest line of a shard sealed just before, or leave a tmp file behind. Sealed
shards are fsynced before their rename, so they are never cut. Invariants checked after every resume:
nothing sealed is lost or changed, nothing is recorded twice, and finishing the run accounts for every id.
"""

from __future__ import annotations

import hashlib
import random
import shutil
from pathlib import Path

import pytest

from tests.helpers import factories
from tokenmill.output import OutputDir, verify
from tokenmill.records import Completion, Failure, Skip

SEEDS = range(60)


def completion(i: int, rng: random.Random) -> Completion:
    return factories.completion(
        f"p{i}",
        prompt=[{"role": "user", "content": f"q{i}"}],
        completion="w" * rng.randint(0, 200),
        prompt_tokens=3,
        completion_tokens=rng.randint(1, 50),
    )


def failure(i: int) -> Failure:
    return factories.failure(f"p{i}")


class Job:
    """A seeded job: which ids complete, fail or are skipped, in which order."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = rng.randint(1, 60)
        self.shard_size = rng.randint(1, 8)
        self.kind = {i: rng.choices(["ok", "fail", "skip"], weights=[85, 10, 5])[0] for i in range(self.n)}
        self.input_ids = [f"p{i}" for i in range(self.n) if self.kind[i] != "skip"]

    def feed(self, out: OutputDir, ids: list[int], flush_every: int) -> None:
        for step, i in enumerate(ids, start=1):
            if self.kind[i] == "ok":
                out.write(completion(i, self.rng))
            elif self.kind[i] == "fail":
                out.fail(failure(i))
            else:
                out.skip(Skip(source=f"in.jsonl:{i}", reason="bad row", id=f"p{i}"))
            if step % flush_every == 0:
                out.flush()

    def pending(self, done: set[str], skipped: set[str]) -> list[int]:
        return [
            i
            for i in range(self.n)
            if (f"p{i}" not in done if self.kind[i] != "skip" else f"in.jsonl:{i}" not in skipped)
        ]


def sealed_shards(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.glob("completions_*.jsonl")}


def sealed_ids(root: Path) -> set[str]:
    import orjson

    return {orjson.loads(line)["id"] for p in root.glob("completions_*.jsonl") for line in p.read_bytes().splitlines()}


def damage(root: Path, rng: random.Random) -> str:
    """Do what a crash can do to the unsynced files; returns what was done (for failure messages)."""
    candidates = [p for p in root.iterdir() if p.name.endswith((".open", "failed.jsonl", "skipped.jsonl"))]
    manifest = root / "manifest.jsonl"
    if manifest.exists():
        candidates.append(manifest)
    choice = rng.random()
    if choice < 0.15 and manifest.exists():
        lines = manifest.read_bytes().splitlines(keepends=True)
        manifest.write_bytes(b"".join(lines[:-1]))  # crashed after the rename, before the manifest line
        return "dropped the last manifest line"
    if choice < 0.2:
        (root / "manifest.jsonl.tmp").write_bytes(b'{"shard"')
        return "left manifest.jsonl.tmp"
    if not candidates:
        return "nothing to damage"
    victim = rng.choice(sorted(candidates))
    size = victim.stat().st_size
    cut_at = rng.randint(0, size)
    with victim.open("r+b") as fh:
        fh.truncate(cut_at)
    return f"cut {victim.name} at {cut_at} of {size}"


@pytest.mark.parametrize("seed", SEEDS)
def test_resume_after_a_random_crash_loses_nothing_sealed_and_duplicates_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    job = Job(rng)
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"

    order = list(range(job.n))
    rng.shuffle(order)
    stop = rng.randint(0, job.n)
    out = OutputDir(live, shard_size=job.shard_size)
    out.open()
    job.feed(out, order[:stop], flush_every=rng.randint(1, 5))
    shutil.copytree(live, crashed)  # the disk as a crash would leave it: flushed bytes only
    out.close(seal=False)
    what = damage(crashed, rng)
    before = sealed_shards(crashed)
    written = {f"p{i}" for i in order[:stop]}

    resumed = OutputDir(crashed, shard_size=job.shard_size)
    state = resumed.open()
    context = f"seed {seed}: {what}; repaired {state.repaired}"
    assert sealed_ids(crashed) <= state.done, context
    assert state.done <= written, context
    assert sealed_shards(crashed) == before, context

    job.feed(resumed, job.pending(state.done, state.skipped_sources), flush_every=3)
    resumed.close(seal=True)
    assert resumed.duplicates == 0, context

    report = verify(crashed, job.input_ids)
    assert report.ok, f"{context}\n{report.render()}"
    assert report.counts["sealed_records"] + report.counts["failed"] == len(job.input_ids), context
    assert report.counts["open_records"] == 0, context
    for name, digest in before.items():
        assert hashlib.sha256((crashed / name).read_bytes()).hexdigest() == digest, context


@pytest.mark.parametrize("seed", range(10))
def test_repeated_crashes_converge(tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    job = Job(rng)
    root = tmp_path / "out"
    for round_no in range(4):
        out = OutputDir(root, shard_size=job.shard_size)
        state = out.open()
        todo = job.pending(state.done, state.skipped_sources)
        rng.shuffle(todo)
        job.feed(out, todo[: rng.randint(0, len(todo))], flush_every=rng.randint(1, 4))
        snapshot = tmp_path / f"snap{round_no}"
        shutil.copytree(root, snapshot)
        out.close(seal=False)
        shutil.rmtree(root)
        snapshot.rename(root)
        damage(root, rng)
    out = OutputDir(root, shard_size=job.shard_size)
    state = out.open()
    job.feed(out, job.pending(state.done, state.skipped_sources), flush_every=2)
    out.close(seal=True)
    report = verify(root, job.input_ids)
    assert report.ok, report.render()
