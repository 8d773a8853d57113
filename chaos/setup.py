"""Everything a chaos run needs before the first kill: a small disk, the object store, the fleet, the fault
proxy and its servers file, the input and the job. Each piece is registered for tear-down as it starts."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from chaos.client import Client, client_env
from chaos.config import ChaosConfig
from chaos.disk import SmallDisk
from chaos.faults import Ctx, Track, describe
from chaos.fleet import Fleet
from chaos.mirror import EndpointsMirror
from chaos.observe import Invariants
from chaos.plan import build
from chaos.proxy import FaultProxy
from chaos.report import ChaosReport
from chaos.store import CREDENTIALS, MotoStore
from chaos.tear import Tear

CONTEXT_TOKENS = 4096  # the simulated servers' context; a long prompt is over it
LONG_PROMPT_CHARS = 5 * CONTEXT_TOKENS  # about 5,000 tokens at the simulator's 4 characters a token
_TOPICS = ("rivers", "prime numbers", "lighthouses", "sourdough", "glaciers", "compilers", "owls", "tides")


@dataclass(slots=True)
class Run:
    """One chaos run's pieces and what it has seen so far."""

    cfg: ChaosConfig
    rng: random.Random
    report: ChaosReport
    job: Path
    input_ids: list[str]
    out: Path
    env: dict[str, str]
    ctx: Ctx
    tracks: list[Track]
    invariants: Invariants = field(default_factory=Invariants)
    tears: list[Tear] = field(default_factory=list)
    overrun: list[str] = field(default_factory=list)  # a time or request budget the run went past
    fresh_starts: list[int] = field(default_factory=list)  # starts on a fresh directory after a machine loss


def prepare(cfg: ChaosConfig, report: ChaosReport, disk: SmallDisk, stack: contextlib.ExitStack, log: Any) -> Run:
    """Start every piece (each stopped by ``stack`` on the way out) and write the input and the job."""
    rng = random.Random(cfg.seed)
    workdir = report.workdir
    env = client_env(CREDENTIALS)
    stack.callback(disk.unmount)
    root = disk.mount()
    if disk.reason:
        report.notes.append(disk.reason)
        report.tally.skipped["disk-full"] = disk.reason
        log(f"chaos: {disk.reason}")
    store = MotoStore()
    stack.callback(store.stop)
    store.start()
    flags = {
        "time-scale": cfg.time_scale,
        "output-len-mean": cfg.output_len_mean,
        "max-running-requests": 64,
        "context-length": CONTEXT_TOKENS,
    }
    fleet = Fleet(workdir, cfg.servers, flags, env)
    stack.callback(fleet.down)
    fleet.up()
    log(f"chaos: fleet of {cfg.servers} simulated servers up: {', '.join(fleet.urls)}")
    proxy = FaultProxy(fleet.urls, rng.randrange(1 << 30))
    stack.callback(proxy.stop)
    servers_file = workdir / "endpoints-proxied.txt"
    mirror = EndpointsMirror(fleet.state_dir / "endpoints.txt", servers_file, proxy.start())
    stack.callback(mirror.stop)
    mirror.start()
    data = workdir / "prompts.jsonl"
    input_ids = write_input(data, cfg.prompts, cfg.long_prompt_every, rng)
    out = root / "out"
    job = write_job(workdir / "job.yaml", cfg, data, servers_file, out, store)
    (workdir / "clients").mkdir(exist_ok=True)
    client = Client(job, workdir / "clients", env)
    stack.callback(client.stop)
    ctx = Ctx(fleet, proxy, store, disk, client, out, report.tally, cfg.stall_s)
    tracks = build(cfg, rng)
    report.plan = describe(tracks)
    report.starts = client.starts
    return Run(cfg, rng, report, job, input_ids, out, env, ctx, tracks)


def write_input(path: Path, n: int, long_every: int, rng: random.Random) -> list[str]:
    """``n`` prompts with stable ids; every ``long_every``-th one is longer than the servers' context."""
    ids = [f"chaos-{i:06d}" for i in range(n)]
    with path.open("wb") as fh:
        for i, rid in enumerate(ids):
            text = f"Prompt {i}: write two sentences about {rng.choice(_TOPICS)}."
            if i % long_every == long_every - 1:
                text += " Context: " + "lorem ipsum " * (LONG_PROMPT_CHARS // 12)
            fh.write(orjson.dumps({"id": rid, "prompt": text}) + b"\n")
    return ids


def write_job(path: Path, cfg: ChaosConfig, data: Path, servers_file: Path, out: Path, store: MotoStore) -> Path:
    """The job: follow the proxied servers file, upload to the store, retry fast, time out reads quickly."""
    job = {
        "input": {"path": str(data), "id_field": "id"},
        "servers_file": str(servers_file),
        "servers_file_poll_s": 0.2,
        "api": "openai-chat",
        "model": "tokenmill-sim",
        "sampling": {"max_tokens": 64},
        "concurrency": cfg.concurrency,
        "output": {
            "dir": str(out),
            "shard_size": cfg.shard_size,
            "remote": store.url,
            "storage_options": store.storage_options(),
            "upload": {
                "backoff_base_s": 0.1,
                "backoff_max_s": 1.0,
                "drain_timeout_s": 15.0,
                "start_wait_s": 1.0,
                "manifest_interval_s": 1.0,
            },
        },
        "retry": {
            "max_attempts": 8,
            "backoff_base_s": 0.05,
            "backoff_max_s": 1.0,
            "connect_timeout_s": cfg.connect_timeout_s,
            "read_timeout_s": cfg.read_timeout_s,
            "quarantine_after": 4,
            "probe_interval_s": 0.3,
        },
        "status_interval_s": 5.0,
        "monitor": {"scrape_interval_s": 1.0, "event_interval_s": 2.0},
    }
    path.write_text(yaml.safe_dump(job))
    return path
