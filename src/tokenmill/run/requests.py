"""A run's requests, its first start-up stage: the input peeked, servers and key, backend, probes, origins.

The input's first row read, the servers waited for and the key read, the backend built, the probes asked (token ids,
thinking), and what each server serves (:mod:`tokenmill.run.runner` puts the stages together).

Nothing is written before this is done: a bad input, servers that never answer, a server that returns no token ids
(with ``save_token_ids``) or leaves its reasoning inline stop the run here.
"""

from __future__ import annotations

import contextlib
import logging

from tokenmill.backends import Backend, BackendOptions, make_backend, probe_token_ids
from tokenmill.backends.http import open_session
from tokenmill.backends.thinking import judge, probe_thinking
from tokenmill.config import JobSpec
from tokenmill.errors import InputError
from tokenmill.monitor.origin import Origins, fetch_origin
from tokenmill.run.access import Access, resolve_access
from tokenmill.run.startup import wait_for_a_server
from tokenmill.sources import iter_prompts

log = logging.getLogger(__name__)

PROBE_SERVERS = 3  # servers tried in turn for the token-ids probe (the first that answers decides)


def peek_input(job: JobSpec) -> None:
    """Read the input's first row: a dataset that is empty or cannot be read stops the run before it waits for any
    server (the whole input, not a partition's share, which may be empty in a job that is not)."""
    rows = iter_prompts(job.input, None, job.samples, job.sampling.seed)
    try:
        first = next(iter(rows), None)
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
    if first is None:
        raise InputError(f"the input holds no rows ({job.input.path or job.input.hf}); check input.path / input.hf")


async def prepare_requests(job: JobSpec) -> tuple[Backend, Access]:
    """The servers and the key (read once, here) and the backend; with save_token_ids, a server is checked for
    token ids first."""
    access = resolve_access(job)
    servers = access.servers
    sendable = [ep.url for ep in access.endpoints if ep.sendable]
    await wait_for_a_server(sendable, job.retry, access.headers)
    options = BackendOptions(
        model=job.model,
        sampling=job.sampling,
        api_key=access.api_key,
        save_token_ids=job.save_token_ids,
        tokenizer=job.tokenizer,
        max_response_bytes=job.retry.max_response_bytes,
    )
    backend = make_backend(job.api, options)
    if job.save_token_ids:
        async with open_session(job.retry, limit=PROBE_SERVERS) as session:
            await probe_token_ids(job.api, options, session, servers[:PROBE_SERVERS])
    async with open_session(job.retry, limit=PROBE_SERVERS) as session:  # every job: what does the model do?
        probe = await probe_thinking(job.api, options, session, servers[:PROBE_SERVERS], job.thinking_probe_mode())
    if probe is not None:
        fine, message = judge(probe, job.api, job.thinking_inline == "ok")
        log.log(logging.INFO if fine else logging.WARNING, "%s", message)
    return backend, access


async def ask_origins(stack: contextlib.AsyncExitStack, job: JobSpec, access: Access) -> Origins:
    """What each server serves (every record's origin): asked now, waited for at most monitor.origin_wait_s."""
    session = await stack.enter_async_context(open_session(job.retry, limit=PROBE_SERVERS))
    headers = dict(access.headers)
    origins = Origins(lambda url: fetch_origin(session, url, headers))
    stack.push_async_callback(origins.close)
    await origins.prime(access.servers, job.monitor.origin_wait_s)
    return origins
