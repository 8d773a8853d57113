"""Record what real SGLang servers expose under a known load, as test fixtures (tests/fixtures/sglang-0.5.23/).

Usage: .venv/bin/python scripts/record_sglang_fixtures.py [OUT_DIR]

Starts the test suite's real SGLang servers one at a time (``make sglang sglang-models`` first), sends each a
known load, and saves, per server: ``/metrics`` while the load runs (``metrics-<name>.txt``), ``/server_info``
(``server_info-<name>.json``), the scheduler's log lines (``log-<name>.txt``) and what the load was and what
the server held when ``/metrics`` was read (``meta.json``). The unit tests read these instead of hand-written
expositions; rerun this script when the pinned SGLang version changes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engines import sglang  # noqa: E402
from tests.engines.pool import LiveServer, ServerPool, sglang_kind  # noqa: E402

from tokenmill.monitor.scrape import parse_metrics  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "fixtures" / f"sglang-{sglang.VERSION}"
LOG_MARKERS = ("Prefill batch", "Decode batch", "KV Cache is allocated", "Mamba Cache is allocated", "max_total_num")


@dataclass(frozen=True)
class Recording:
    """One server to record: its kind, the load sent, and when to read /metrics."""

    name: str
    hybrid: bool
    flags: tuple[str, ...]
    requests: int
    max_new_tokens: int
    priorities: bool = False

    def ready(self, running: float | None, queued: float | None, cap: int) -> bool:
        """The moment to read /metrics: every request admitted up to the cap, and a queue when there are more."""
        if running != min(self.requests, cap) or queued is None:
            return False
        return queued > 0 if self.requests > cap else queued == 0


RECORDINGS = (
    Recording("dense", False, sglang.dense_flags(), requests=8, max_new_tokens=400),
    Recording(
        "dense-priority",
        False,
        sglang.dense_flags(extra=("--enable-priority-scheduling",)),
        requests=8,
        max_new_tokens=400,
        priorities=True,
    ),
    Recording("hybrid", True, sglang.hybrid_flags(), requests=30, max_new_tokens=200),
)


async def _post(http: aiohttp.ClientSession, url: str, i: int, rec: Recording) -> None:
    body: dict[str, Any] = {
        "text": f"Recording {i}: tell me about the world and its people.",
        "sampling_params": {"max_new_tokens": rec.max_new_tokens, "ignore_eos": True},
    }
    if rec.priorities:
        body["priority"] = i % 2
    async with http.post(url + "/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()


async def _record(server: LiveServer, rec: Recording, out: Path) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        async with http.get(server.base_url + "/server_info") as resp:
            info = await resp.json()
        cap = int(info["internal_states"][0]["effective_max_running_requests_per_dp"])
        log_start = len(server.log_text())
        tasks = [asyncio.create_task(_post(http, server.base_url, i, rec)) for i in range(rec.requests)]
        deadline = time.monotonic() + 120
        seen: set[tuple[float | None, float | None]] = set()
        while True:
            async with http.get(server.base_url + "/metrics") as resp:
                text = await resp.text()
            snap = parse_metrics(text, time.monotonic())
            if rec.ready(snap.running, snap.queued, cap):
                break
            seen.add((snap.running, snap.queued))
            if time.monotonic() > deadline:
                raise SystemExit(f"{rec.name}: the load never showed (cap {cap}); seen {sorted(seen)}")
            await asyncio.sleep(0.05)
        await asyncio.gather(*tasks)
    (out / f"metrics-{rec.name}.txt").write_text(text)
    (out / f"server_info-{rec.name}.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    lines = [ln for ln in server.log_text()[log_start:].splitlines() if any(m in ln for m in LOG_MARKERS)]
    startup = [ln for ln in server.log_text()[:log_start].splitlines() if any(m in ln for m in LOG_MARKERS[2:])]
    (out / f"log-{rec.name}.txt").write_text("".join(line + "\n" for line in startup + lines))
    return {
        "flags": list(sglang.COMMON_FLAGS) + list(rec.flags),
        "model": "tiny hybrid GDN (Qwen3-Next)" if rec.hybrid else "tiny dense (Llama)",
        "requests": rec.requests,
        "max_new_tokens": rec.max_new_tokens,
        "priorities": rec.priorities,
        "running_cap": cap,
        "running_at_capture": snap.running,
        "queued_at_capture": snap.queued,
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"sglang_version": sglang.VERSION, "recordings": {}}
    with tempfile.TemporaryDirectory(prefix="record-sglang-") as tmp:
        pool = ServerPool(Path(tmp), limit=1)
        try:
            for rec in RECORDINGS:
                kind = sglang_kind(f"record-{rec.name}", rec.hybrid, rec.flags)
                server = pool.get(kind.name)
                meta["recordings"][rec.name] = asyncio.run(_record(server, rec, out))
                print(f"recorded {rec.name}: {meta['recordings'][rec.name]}")
                pool.stop(kind.name)
        finally:
            pool.close()
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
