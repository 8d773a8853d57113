"""Decode-throughput samples scraped from a live SGLang server over a window, for ``tokenmill calibrate``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp

from tokenmill.config import PlannerSpec, normalize_url
from tokenmill.errors import InputError, ServerError
from tokenmill.planner.calibrate import ThroughputSample, samples_from_log, samples_from_metrics, usable


async def _fetch(session: aiohttp.ClientSession, url: str) -> str:
    try:
        async with session.get(url) as resp:
            body = await resp.text()
            if resp.status == 404:
                raise ServerError(f"{url} answered 404: start SGLang with --enable-metrics")
            if resp.status != 200:
                raise ServerError(f"{url} answered HTTP {resp.status}; is this an SGLang server?")
            return body
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise ServerError(f"cannot scrape {url}: {type(exc).__name__}: {exc}; check the URL and that it is up") from exc


async def scrape_samples(
    base_url: str, *, window_s: float, interval_s: float, max_samples: int | None
) -> list[ThroughputSample]:
    """Scrape ``/metrics`` every ``interval_s`` for ``window_s`` (or until ``max_samples`` distinct ones)."""
    url = f"{normalize_url(base_url)}/metrics"
    timeout = aiohttp.ClientTimeout(total=max(5.0, interval_s * 2))
    samples: list[ThroughputSample] = []
    deadline = time.monotonic() + window_s
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            samples.extend(samples_from_metrics(await _fetch(session, url)))
            if max_samples is not None and len(usable(samples)) >= max_samples:
                break
            if time.monotonic() + interval_s > deadline:
                break
            await asyncio.sleep(interval_s)  # the scrape period, not a synchronization
    return samples


def log_samples(path: str | Path) -> list[ThroughputSample]:
    """The samples of a saved log: SGLang's scheduler log (Decode batch lines) or JSON lines."""
    try:
        with Path(path).open(encoding="utf-8", errors="replace") as fh:
            return samples_from_log(fh)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc


def collect_samples(
    server: str | None,
    metrics_log: str | None,
    config: PlannerSpec,
    *,
    window_s: float | None = None,
    interval_s: float | None = None,
    max_samples: int | None = None,
) -> list[ThroughputSample]:
    """The samples of ``tokenmill calibrate``: scraped from ``server`` (over ``window_s``, every ``interval_s``;
    None: the planner config's), or read from ``metrics_log``."""
    if server is None:
        assert metrics_log is not None
        return log_samples(metrics_log)
    return asyncio.run(
        scrape_samples(
            server,
            window_s=window_s if window_s is not None else config.calibrate_window_s,
            interval_s=interval_s or config.calibrate_interval_s,
            max_samples=max_samples,
        )
    )
