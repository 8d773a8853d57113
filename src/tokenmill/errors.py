"""The tokenmill exception tree.

Every failure that reaches the user is one of these; foreign exceptions (aiohttp, pyarrow, pydantic,
datasets, OS errors) are translated at the boundary of the module that owns the dependency, keeping the
cause (``raise X(...) from exc``). Whether a failure may be retried is a property of its type.

    TokenmillError                      base; ``str(err)`` is a user-facing message that says what to do
    ├── ConfigError                     the job spec or a CLI option is invalid (names the field and the fix)
    │   └── DoesNotFitError             the planner: a model and its pools do not fit on the GPU with these flags
    ├── InputError                      the input cannot be read (names the file, and the line where known)
    │   └── BadRowError                 one row is unusable (file + line + reason); skip-able by policy
    ├── OutputError                     the output directory is unusable (corrupt file, disk full, permissions)
    ├── RequestError                    one generation request failed; its type steers the dispatcher:
    │   ├── TransientError              retried, preferably on another server; spends one of the prompt's attempts
    │   │   │                           (read timeout, 5xx but 503, a malformed or truncated body)
    │   │   └── ServerFault             retried without spending an attempt: the server's state is at fault
    │   │                               (refused/reset connection, connect timeout, 429, 503)
    │   ├── PermanentError              not retried: the server rejected this prompt (another 4xx); recorded
    │   │                               in failed.jsonl with the server's message
    │   └── MisconfiguredError          the server refuses every request of this job (401/403/404/405, no token
    │                                   ids): it is set aside, and the run stops when every server says so
    ├── ServerError                     a server cannot be used at all (bad URL, no model, fleet start failed)
    └── StoreError                      the remote object store failed or refused an operation
        ├── StoreUnavailable            retryable: unreachable, throttled, access refused, bucket missing
        └── StoreConflict               not retryable: a remote object is in the way (foreign data, other job)

``counts_against_prompt`` and ``retryable`` are properties of the type, read by the dispatcher and the uploader.
"""

from __future__ import annotations


class TokenmillError(Exception):
    """Base of every error tokenmill raises on purpose."""

    retryable: bool = False
    counts_against_prompt: bool = True  # a retry spends one of the prompt's attempts


class ConfigError(TokenmillError):
    """The job spec or a command-line option is invalid."""


class DoesNotFitError(ConfigError):
    """The model and its pools do not fit on the GPU with these flags."""


class InputError(TokenmillError):
    """An input file or dataset cannot be read."""


class BadRowError(InputError):
    """A single input row is unusable; under ``on_bad_row: skip`` it is recorded and skipped."""

    def __init__(self, source: str, reason: str, row_id: str | None = None) -> None:
        self.source = source
        self.reason = reason
        self.row_id = row_id
        super().__init__(f"{source}: {reason} (fix the row, or rerun with --on-bad-row skip to record it and go on)")


class OutputError(TokenmillError):
    """The output directory cannot be written or holds something inconsistent."""


class RequestError(TokenmillError):
    """One request to one server failed."""

    def __init__(self, message: str, status: int | None = None, server: str | None = None) -> None:
        self.message = message
        self.status = status
        self.server = server
        super().__init__(message)


class TransientError(RequestError):
    """A failure worth retrying, preferably on another server."""

    retryable = True


class RequestTimeout(TransientError):
    """No answer within ``retry.read_timeout_s``. The dispatcher tells overload (the server holds a queue or keeps
    answering others) from a server that does not answer."""


class ServerFault(TransientError):
    """A transient failure caused by the server's state (down, overloaded): it does not use up attempts."""

    counts_against_prompt = False


class PermanentError(RequestError):
    """The server rejected this request; retrying cannot help (e.g. prompt longer than the context)."""


class MisconfiguredError(RequestError):
    """The server refuses every request of this job (bad API key, wrong endpoint or model, no token ids)."""


class ServerError(TokenmillError):
    """A server cannot be used at all."""


class StoreError(TokenmillError):
    """The remote object store failed or refused an operation."""


class StoreUnavailable(StoreError):
    """The store could not do an operation now (unreachable, throttled, refused); retrying may succeed."""

    retryable = True


class StoreConflict(StoreError):
    """A remote object is in the way (different content, another job's prefix); it is never overwritten."""
