"""The servers at start: the run waits at most ``retry.startup_wait_s`` for a first server to answer.

Every sendable server is asked ``/health`` every ``retry.probe_interval_s``; the first answer (any HTTP status,
or a connection made) ends the wait, and from then on a server that goes away is the
dispatcher's (waited for and probed for as long as it takes). When none has answered by the deadline, the servers
are not coming: a mistyped or dead URL stops the run with exit 2, each URL named with its last error, before
anything is written. The first round that finds none says so at once, with what is retried and for how long.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from tokenmill.backends.http import open_session, server_answers
from tokenmill.config import RetrySpec
from tokenmill.errors import ServerError

log = logging.getLogger(__name__)

Check = Callable[[str], Awaitable[str | None]]  # a URL -> None when it answers, else why not


async def wait_for_a_server(
    urls: Sequence[str],
    retry: RetrySpec,
    headers: Mapping[str, str],
    *,
    check: Check | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Return once any of ``urls`` answers (``check``; by default its ``/health``, :func:`server_answers`); a
    :class:`ServerError` naming each URL and its error when none has within ``retry.startup_wait_s``."""
    if not urls:
        return
    if check is None:
        async with open_session(retry, limit=len(urls)) as session:
            await wait_for_a_server(
                urls,
                retry,
                headers,
                check=lambda url: server_answers(session, url, headers, retry.connect_timeout_s),
                clock=clock,
                sleep=sleep,
            )
        return
    deadline = clock() + retry.startup_wait_s
    said = False
    while True:
        problems = await asyncio.gather(*(check(url) for url in urls))
        if any(p is None for p in problems):
            if said:
                log.info("a server answers: starting")
            return
        each = "; ".join(f"{url}: {p}" for url, p in zip(urls, problems, strict=True))
        left = deadline - clock()
        if left <= 0:
            raise ServerError(
                f"no server answered within retry.startup_wait_s ({retry.startup_wait_s:.0f} s): {each}. Check "
                "the URLs (servers / servers_file, e.g. the host and port) and that the servers are up, then "
                "rerun; servers still loading a model may need a longer retry.startup_wait_s"
            )
        if not said:
            log.warning(
                "no server answers yet (%s): probing every %.0f s for up to retry.startup_wait_s (%.0f s), "
                "then the run stops",
                each,
                retry.probe_interval_s,
                retry.startup_wait_s,
            )
            said = True
        await sleep(min(retry.probe_interval_s, left))
