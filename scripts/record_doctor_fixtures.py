"""Record doctor fixtures (tests/fixtures/metrics/doctor/*.yaml) from real SGLang servers under a held load.

Usage: .venv/bin/python scripts/record_doctor_fixtures.py [NAME ...] [--out DIR]

Starts the test suite's real SGLang server (the tiny dense model, ``make sglang sglang-models`` first) with
each recording's flags, one server at a time, and holds a fixed number of requests in flight (``ignore_eos``,
answers long enough to outlast the scrapes). Once ``/metrics`` shows the situation (every request admitted up
to the cap, a queue exactly when there are more requests than the cap), it takes ``SCRAPES`` bodies
``INTERVAL_S`` apart, checks each still shows it, and writes the fixture: its ``about`` line, the interval,
the ``/server_info`` fields the monitor reads (:func:`tokenmill.monitor.info.parse_server_info`), the
client's side (in flight, limit) and the scrapes as SGLang served them. Without NAME every recording is made.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engines import sglang  # noqa: E402
from tests.engines.pool import LiveServer, ServerPool, sglang_kind  # noqa: E402

from tokenmill.monitor.scrape import parse_metrics  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "fixtures" / "metrics" / "doctor"
SCRAPES = 3
INTERVAL_S = 2.0
KV_TOKENS = 1_048_576  # room for every request at full length: the pools are not what binds
MAX_NEW_TOKENS = sglang.CONTEXT_LENGTH - 64  # as long as the tiny model's context allows, so the load lasts
SHOW_DEADLINE_S = 180.0
# what parse_server_info reads, at the top level and per DP rank (the whole body is ~43 kB of launch flags)
INFO_KEYS = (
    "model_path", "version", "max_running_requests", "max_total_tokens", "max_total_num_tokens",
    "disable_radix_cache", "disable_overlap_schedule", "mamba_radix_cache_strategy", "mamba_scheduler_strategy",
    "max_mamba_cache_size", "mamba_ssm_dtype", "mem_fraction_static", "tp_size", "dp_size", "page_size",
    "chunked_prefill_size", "context_length", "kv_cache_dtype", "quantization", "schedule_conservativeness",
    "speculative_algorithm", "enable_deterministic_inference",
)  # fmt: skip
RANK_KEYS = ("effective_max_running_requests_per_dp", "max_mamba_cache_size", "mamba_radix_cache_strategy")


@dataclass(frozen=True)
class DoctorRecording:
    """One fixture: the server's extra flags, the requests the client holds in flight, the about line."""

    name: str
    extra_flags: tuple[str, ...]
    inflight: int
    about: str

    @property
    def flags(self) -> tuple[str, ...]:
        return sglang.dense_flags(KV_TOKENS, self.extra_flags)

    def shows(self, running: float | None, queued: float | None, cap: int) -> bool:
        """Every request admitted up to the cap, and a queue exactly when there are more than the cap."""
        if running != min(self.inflight, cap) or queued is None:
            return False
        return queued > 0 if self.inflight > cap else queued == 0


RECORDINGS = {
    r.name: r
    for r in (
        DoctorRecording(
            "underfeeding",
            ("--max-running-requests", "64"),
            inflight=8,
            about=f"Recorded from a real SGLang {sglang.VERSION} CPU server (tiny dense model, --max-running-requests"
            f" 64, --max-total-tokens {KV_TOKENS:,}) with a client holding 8 requests in flight (ignore_eos, "
            f"max_new_tokens {MAX_NEW_TOKENS}): queue empty, running 8 of 64, KV nearly empty.",
        ),
        DoctorRecording(
            "compute_bound",
            ("--max-running-requests", "32", "--disable-radix-cache"),
            inflight=64,
            about=f"Recorded from a real SGLang {sglang.VERSION} CPU server (tiny dense model, --max-running-requests"
            f" 32, radix cache off, --max-total-tokens {KV_TOKENS:,}) with 64 requests in flight (ignore_eos, "
            f"max_new_tokens {MAX_NEW_TOKENS}): running at the cap, a queue of 32, KV nearly empty.",
        ),
    )
}


def info_subset(info: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a /server_info body that the monitor reads, in a fixed order (the model path relative to
    the repository, so the fixture does not depend on where it was recorded)."""
    out = {k: info[k] for k in INFO_KEYS if k in info}
    if isinstance(out.get("model_path"), str) and Path(out["model_path"]).is_relative_to(ROOT):
        out["model_path"] = str(Path(out["model_path"]).relative_to(ROOT))
    ranks = info.get("internal_states")
    if isinstance(ranks, list):
        out["internal_states"] = [{k: r[k] for k in RANK_KEYS if k in r} for r in ranks if isinstance(r, Mapping)]
    return out


async def _post(http: aiohttp.ClientSession, url: str, i: int) -> None:
    body = {
        "text": f"Doctor fixture request {i}: tell me about the world and its people.",
        "sampling_params": {"max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
    }
    async with http.post(url + "/generate", json=body) as resp:
        await resp.read()


async def _metrics(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url + "/metrics") as resp:
        resp.raise_for_status()
        return await resp.text()


async def _record(server: LiveServer, rec: DoctorRecording) -> dict[str, Any]:
    url = server.base_url
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as http:
        async with http.get(url + "/server_info") as resp:
            info = await resp.json()
        cap = int(info["internal_states"][0]["effective_max_running_requests_per_dp"])
        tasks = [asyncio.create_task(_post(http, url, i)) for i in range(rec.inflight)]
        try:
            deadline = time.monotonic() + SHOW_DEADLINE_S
            seen: set[tuple[float | None, float | None]] = set()
            while True:
                snap = parse_metrics(await _metrics(http, url), time.monotonic())
                if rec.shows(snap.running, snap.queued, cap):
                    break
                seen.add((snap.running, snap.queued))
                if time.monotonic() > deadline or any(t.done() for t in tasks):
                    raise SystemExit(f"{rec.name}: the load never showed (cap {cap}); seen {sorted(seen, key=str)}")
                await asyncio.sleep(0.1)
            scrapes: list[str] = []
            for i in range(SCRAPES):
                if i:
                    await asyncio.sleep(INTERVAL_S)
                text = await _metrics(http, url)
                snap = parse_metrics(text, time.monotonic())
                if not rec.shows(snap.running, snap.queued, cap) or any(t.done() for t in tasks):
                    raise SystemExit(f"{rec.name}: scrape {i} shows running {snap.running}, queued {snap.queued}")
                scrapes.append(text)
        finally:
            for t in tasks:
                t.cancel()  # closing the connections aborts the requests on the server
            await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "about": rec.about,
        "interval_s": INTERVAL_S,
        "server_info": info_subset(info),
        "client": {"inflight": rec.inflight, "limit": rec.inflight},
        "scrapes": scrapes,
    }


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"fixtures to record: {', '.join(RECORDINGS)} (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv[1:])
    unknown = [n for n in args.names if n not in RECORDINGS]
    if unknown:
        ap.error(f"unknown fixture(s): {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="record-doctor-") as tmp:
        pool = ServerPool(Path(tmp), limit=1)
        try:
            for name in args.names or list(RECORDINGS):
                rec = RECORDINGS[name]
                kind = sglang_kind(f"doctor-{rec.name}", False, rec.flags)
                doc = asyncio.run(_record(pool.get(kind.name), rec))
                pool.stop(kind.name)
                path = args.out / f"{rec.name}.yaml"
                path.write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True))
                print(f"recorded {path}")
        finally:
            pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
