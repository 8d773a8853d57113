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
    """One fixture: the server's extra flags, the requests the client holds in flight, the about line.

    ``situation`` is what every scrape must show: ``cap`` (every request admitted up to the cap, a queue exactly
    when there are more requests than the cap), ``kv`` (a queue while running is below the cap: the KV pool's
    admission reserve is spent) or ``retract`` (the retraction counter rising over the scrapes). Requests are
    ``ignore_eos`` unless ``ignore_eos`` is off: then ``min_new_tokens`` holds them to their full length, and
    SGLang admits them on its decaying new-token ratio (and retracts when the pool runs out)."""

    name: str
    extra_flags: tuple[str, ...]
    inflight: int
    about: str
    kv_tokens: int = KV_TOKENS
    max_new_tokens: int = MAX_NEW_TOKENS
    ignore_eos: bool = True
    situation: str = "cap"
    scrapes: int = SCRAPES
    interval_s: float = INTERVAL_S

    @property
    def flags(self) -> tuple[str, ...]:
        return sglang.dense_flags(self.kv_tokens, self.extra_flags)

    @property
    def process(self) -> dict[str, Any] | None:
        """The client process as the doctor reads it (what SGLang reserves KV for), for the KV recordings."""
        if self.situation == "cap":
            return None
        return {"max_tokens": self.max_new_tokens, "avg_prompt_tokens": PROMPT_TOKENS, "ignore_eos": self.ignore_eos}

    def shows(self, running: float | None, queued: float | None, cap: int, retracted: float | None = None) -> bool:
        """What one scrape must show for the recording's situation (a retraction recording starts once the
        server has retracted: it writes the counter from its first retraction on)."""
        if running is None or queued is None:
            return False
        if self.situation == "kv":
            return 0 < running < cap and queued > 0 and running + queued == self.inflight
        if self.situation == "retract":
            return running > 0 and retracted is not None
        if running != min(self.inflight, cap):
            return False
        return queued > 0 if self.inflight > cap else queued == 0

    def holds(self, first: float | None, last: float | None) -> bool:
        """Over the scrapes: a retraction recording saw the counter rise (the others need nothing more)."""
        return self.situation != "retract" or (last or 0.0) > (first or 0.0)


PROMPT_TOKENS = 60  # token ids of each request's own (no two share a prefix)
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
        DoctorRecording(
            "idle",
            ("--max-running-requests", "64"),
            inflight=0,
            about=f"Recorded from a real SGLang {sglang.VERSION} CPU server (tiny dense model, --max-running-requests"
            f" 64, --max-total-tokens {KV_TOKENS:,}) with no requests sent: nothing running, nothing queued.",
        ),
        DoctorRecording(
            "kv_bound",
            ("--max-running-requests", "64"),
            inflight=12,
            kv_tokens=8192,
            situation="kv",
            about=f"Recorded from a real SGLang {sglang.VERSION} CPU server (tiny dense model, --max-running-requests"
            f" 64, --max-total-tokens 8,192) with a client holding 12 requests in flight ({PROMPT_TOKENS}-token "
            f"prompts, ignore_eos, max_new_tokens {MAX_NEW_TOKENS}): each reserves its prompt and whole output at "
            "admission, so only a few of 64 run and the rest queue while the KV gauge still shows room.",
        ),
        DoctorRecording(
            "retractions",
            (),
            inflight=24,
            kv_tokens=4096,
            max_new_tokens=900,
            ignore_eos=False,
            situation="retract",
            scrapes=5,
            interval_s=6.0,
            about=f"Recorded from a real SGLang {sglang.VERSION} CPU server (tiny dense model, --max-total-tokens "
            f"4,096) with a client holding 24 requests in flight ({PROMPT_TOKENS}-token prompts, min_new_tokens = "
            "max_new_tokens = 900, no ignore_eos): SGLang admits on its decaying new-token ratio, the pool runs out "
            "as the answers grow and it retracts running requests (the retraction counter rises).",
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


def prompt_ids(i: int) -> list[int]:
    """``PROMPT_TOKENS`` token ids of request ``i``'s own (no two requests share a prefix; no special ids)."""
    return [16 + (i * 97 + j * 31) % 480 for j in range(PROMPT_TOKENS)]


async def _held(http: aiohttp.ClientSession, url: str, rec: DoctorRecording, i: int) -> None:
    """Request ``i``'s slot of the load: for a retraction recording, a finished request is followed by a new one
    (the client holds ``inflight`` requests throughout); otherwise the one request."""
    n = 0
    while True:
        await _post(http, url, rec, i + n * rec.inflight)
        if rec.situation != "retract":
            return
        n += 1


async def _post(http: aiohttp.ClientSession, url: str, rec: DoctorRecording, i: int) -> None:
    params: dict[str, Any] = {"max_new_tokens": rec.max_new_tokens}
    if rec.ignore_eos:
        params["ignore_eos"] = True
    else:
        params["min_new_tokens"] = rec.max_new_tokens
    if rec.situation == "cap":
        body: dict[str, Any] = {"text": f"Doctor fixture request {i}: tell me about the world and its people."}
    else:
        body = {"input_ids": prompt_ids(i)}
    async with http.post(url + "/generate", json={**body, "sampling_params": params}) as resp:
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
        tasks = [asyncio.create_task(_held(http, url, rec, i)) for i in range(rec.inflight)]
        try:
            deadline = time.monotonic() + SHOW_DEADLINE_S
            seen: set[tuple[float | None, float | None]] = set()
            while True:
                snap = parse_metrics(await _metrics(http, url), time.monotonic())
                if rec.shows(snap.running, snap.queued, cap, snap.preemptions_total):
                    break
                seen.add((snap.running, snap.queued))
                if time.monotonic() > deadline or any(t.done() for t in tasks):
                    raise SystemExit(f"{rec.name}: the load never showed (cap {cap}); seen {sorted(seen, key=str)}")
                await asyncio.sleep(0.1)
            scrapes: list[str] = []
            retracted: list[float | None] = []
            for i in range(rec.scrapes):
                if i:
                    await asyncio.sleep(rec.interval_s)
                text = await _metrics(http, url)
                snap = parse_metrics(text, time.monotonic())
                if not rec.shows(snap.running, snap.queued, cap, snap.preemptions_total) or any(
                    t.done() for t in tasks
                ):
                    raise SystemExit(f"{rec.name}: scrape {i} shows running {snap.running}, queued {snap.queued}")
                scrapes.append(text)
                retracted.append(snap.preemptions_total)
            if not rec.holds(retracted[0], retracted[-1]):
                raise SystemExit(f"{rec.name}: the retraction counter did not rise over the scrapes: {retracted}")
        finally:
            for t in tasks:
                t.cancel()  # closing the connections aborts the requests on the server
            await asyncio.gather(*tasks, return_exceptions=True)
    doc: dict[str, Any] = {
        "about": rec.about,
        "interval_s": rec.interval_s,
        "server_info": info_subset(info),
        "client": {"inflight": rec.inflight, "limit": rec.inflight},
    }
    if rec.process is not None:
        doc["process"] = rec.process
    return {**doc, "scrapes": scrapes}


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
