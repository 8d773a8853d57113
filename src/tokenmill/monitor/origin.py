"""Where a server's answers come from: the model it serves, its engine and version, and a hash of its launch
flags, stamped on every record it completes (``origin``) so that records made before and after a re-flag, or on
servers with other flags, can be told apart.

Read from the server itself: ``/v1/models`` (the served model name, and ``owned_by``), SGLang's ``/server_info``
(its version and launch flags; the simulated server's own settings too) or vLLM's ``/version``. vLLM does not
report its launch flags, so its records carry no flags hash. The hash covers the flags as the server reports
them, less what differs between two replicas of one configuration (host, ports, GPU index, start time, the
scheduler's live state, the log level): two servers started alike hash alike.

:class:`Origins` looks each server up once, in the background (the hot path never waits on it), and again after
the dispatcher has set the server aside (it may come back restarted with other flags). A server that does not say
what it is (no ``/v1/models``, a failed look-up) is asked again :data:`ASK_AGAIN_S` later, not for every record.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

log = logging.getLogger(__name__)

_VOLATILE = frozenset(
    {
        "internal_states",
        "startup_time",
        "version",
        "host",
        "port",
        "base_gpu_id",
        "gpu_id",
        "dist_init_addr",
        "log_level",
        "log_level_http",
        "random_seed",  # drawn per process when not given; it matters only with deterministic inference
        "status",
        "max_total_num_tokens",
        "max_req_input_len",
    }
)
FLAGS_HASH_CHARS = 16
ASK_AGAIN_S = 60.0  # a server that did not say what it is is asked again this long after


@dataclass(frozen=True, slots=True)
class Origin:
    """What one server says it is; ``None`` where it does not say."""

    served_model: str | None
    engine: str | None
    engine_version: str | None
    flags_hash: str | None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "served_model": self.served_model,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "flags_hash": self.flags_hash,
        }


def flags_hash(server_info: Mapping[str, Any]) -> str:
    """The hash of a server's launch flags as ``/server_info`` reports them (replica-specific keys left out)."""
    kept = {k: v for k, v in server_info.items() if k not in _VOLATILE and not k.endswith("_port")}
    data = orjson.dumps(kept, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    return hashlib.sha256(data).hexdigest()[:FLAGS_HASH_CHARS]


def origin_from(models: Any, server_info: Any, version: Any) -> Origin:
    """The origin from the bodies of ``/v1/models``, ``/server_info`` and ``/version`` (each may be None)."""
    served = owner = None
    entries = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(entries, list) and entries and isinstance(entries[0], Mapping):
        served = _str(entries[0].get("id"))
        owner = _str(entries[0].get("owned_by"))
    if isinstance(server_info, Mapping):
        engine = "tokenmill-sim" if "tokenmill_sim" in server_info else "sglang"
        return Origin(served, engine, _str(server_info.get("version")), flags_hash(server_info))
    got = version.get("version") if isinstance(version, Mapping) else None
    return Origin(served, owner, _str(got), None)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


async def _body(session: aiohttp.ClientSession, url: str, headers: Mapping[str, str]) -> Any:
    try:
        async with session.get(url, headers=dict(headers)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def fetch_origin(
    session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str] | None = None
) -> Origin:
    """Ask ``base_url`` what it is (three small GETs; a server that answers none gives an all-None origin)."""
    base = base_url.rstrip("/")
    hdrs = dict(headers or {})
    models = await _body(session, base + "/v1/models", hdrs)
    info = await _body(session, base + "/server_info", hdrs)
    version = None if isinstance(info, Mapping) else await _body(session, base + "/version", hdrs)
    return origin_from(models, info, version)


class Origins:
    """Each server's origin, looked up in the background: :meth:`get` never waits."""

    def __init__(self, fetch: Callable[[str], Awaitable[Origin]], clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._known: dict[str, Origin] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._silent: dict[str, float] = {}  # a server that said nothing: when it is asked again

    def get(self, url: str) -> Origin | None:
        """The origin of ``url`` if known; else a look-up starts (None until it is done), unless the server said
        nothing less than :data:`ASK_AGAIN_S` ago."""
        found = self._known.get(url)
        if found is None and url not in self._pending and self._clock() >= self._silent.get(url, -math.inf):
            self._start(url)
        return found

    def forget(self, url: str) -> None:
        """``url`` may come back as another server (restarted, re-flagged): look it up again."""
        self._known.pop(url, None)
        self._silent.pop(url, None)

    async def prime(self, urls: Iterable[str], timeout_s: float) -> None:
        """Look ``urls`` up now, waiting at most ``timeout_s`` (those still pending go on in the background)."""
        for url in urls:
            if url not in self._known and url not in self._pending:
                self._start(url)
        tasks = list(self._pending.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    async def close(self) -> None:
        for task in list(self._pending.values()):
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()

    def _start(self, url: str) -> None:
        self._pending[url] = asyncio.get_running_loop().create_task(self._lookup(url))

    async def _lookup(self, url: str) -> None:
        try:
            origin = await self._fetch(url)
        except Exception as exc:  # a look-up must never take the run down: the record then says nothing
            log.warning("could not ask %s what it serves (%s); its records carry no origin for now", url, exc)
            origin = None
        finally:
            self._pending.pop(url, None)
        if origin is not None and (origin.served_model or origin.engine):
            self._known[url] = origin
            self._silent.pop(url, None)
        else:
            self._silent[url] = self._clock() + ASK_AGAIN_S
