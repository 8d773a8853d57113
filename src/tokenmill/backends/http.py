"""The run's HTTP client: one pooled aiohttp session sized so it never caps the dispatcher's in-flight limits,
with timeouts that bound a whole request, the health probe for servers set aside, and whether a server is there at
all (the start wait)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import aiohttp

from tokenmill.config import RetrySpec

PROBE_TIMEOUT_S = 10.0


def open_session(retry: RetrySpec, limit: int) -> aiohttp.ClientSession:
    """A session for ``limit`` requests at once (0: unbounded, for limits that may grow).

    The dispatcher bounds in-flight requests per server itself; the pool must never cap below that (aiohttp's
    default of 100 would). ``total`` bounds the whole request, so a body trickling in a byte at a time never
    trips a per-read timeout and holds a slot forever.
    """
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(
        total=retry.connect_timeout_s + retry.read_timeout_s,
        sock_connect=retry.connect_timeout_s,
        sock_read=retry.read_timeout_s,
    )
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def probe_health(session: aiohttp.ClientSession, url: str) -> bool:
    """True when the server answers ``/health`` (or ``/v1/models`` where there is no ``/health``) with 200."""
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    for path in ("/health", "/v1/models"):
        try:
            async with session.get(url + path, timeout=timeout) as resp:
                if resp.status == 200:
                    return True
                if resp.status != 404:
                    return False
        except (aiohttp.ClientError, TimeoutError):
            return False
    return False


async def server_answers(
    session: aiohttp.ClientSession, url: str, headers: Mapping[str, str], connect_timeout_s: float
) -> str | None:
    """None when something answers at ``url`` (any HTTP status to ``/health``: a server is there, ready or not;
    a connection made and then slow is a busy server), else why not, in a few words: connection refused, no such
    host, no connection within ``connect_timeout_s`` (the run's start wait, :mod:`tokenmill.run.startup`)."""
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S, sock_connect=connect_timeout_s)
    try:
        async with session.get(url + "/health", timeout=timeout, headers=dict(headers)):
            return None
    except aiohttp.ConnectionTimeoutError:
        return f"no connection within {connect_timeout_s:.0f} s"
    except aiohttp.ClientConnectorDNSError as exc:
        return f"no such host ({exc.os_error.strerror or exc.os_error})"
    except aiohttp.ClientConnectorError as exc:
        err = exc.os_error
        why = os.strerror(err.errno) if err.errno else err.strerror or str(err)
        return why[:1].lower() + why[1:] if why else "cannot connect"
    except (aiohttp.ClientError, TimeoutError):
        return None  # connected, then slow, dropped or odd: there is a server
