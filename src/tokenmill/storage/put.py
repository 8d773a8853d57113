"""One sealed shard to the prefix: put if absent, adopted when the same content is there, never written over.

A shard whose local copy is to be deleted (``delete_after_upload``) is read back first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.output import SealedShard
from tokenmill.storage.prefix import MARKER
from tokenmill.storage.retry import Clock, Retrying
from tokenmill.storage.store import Store


@dataclass(frozen=True, slots=True)
class Put:
    """What became of one shard."""

    conflict: str | None = None  # why it is not at the prefix (None: it is)
    wrote: bool = False  # this call put the object (else an object with its content was there: adopted)
    took: float = 0.0  # seconds the put took
    verified: bool = False  # its remote copy was read back (or found) the same: the local file may go


def put_shard(
    store: Store,
    shard: SealedShard,
    retry: Retrying,
    clock: Clock,
    *,
    finished: bool,
    verify: bool,
    before_put: Callable[[], None],
) -> Put:
    """Put ``shard`` at ``store``. ``finished``: the prefix marks the job finished and the run may not reopen it
    (a new shard is refused; one that is there already is adopted); ``verify``: read the copy back (for
    ``delete_after_upload``); ``before_put`` runs right before a put (the ledger withdraws its markers)."""
    if not shard.path.exists():  # it lives at the remote only (taken over, or offloaded): adopted when there
        if retry("read", lambda: store.sha256(shard.name)) != shard.sha256:
            return Put(f"the local file {shard.path} is gone and the remote holds no copy of it")
        return Put()
    if finished:  # a new shard for a finished job: never added silently
        if retry("read", lambda: store.sha256(shard.name)) == shard.sha256:
            return Put()  # it is there already: adopted, nothing is added
        return Put(
            f"{MARKER} says the job is finished, and it is not reopened silently: rerun with --reopen to add this shard"
        )
    before_put()
    started = clock()
    wrote = retry("upload", lambda: store.put_file_if_absent(shard.path, shard.name))
    took = clock() - started
    there: str | None = None
    if not wrote:
        there = retry("read", lambda: store.sha256(shard.name))
        if there != shard.sha256:
            return Put("an object with other content is there; it was not overwritten")
    if not verify:
        return Put(wrote=wrote, took=took)
    if (there or retry("read", lambda: store.sha256(shard.name))) != shard.sha256:
        return Put("the uploaded object reads back with another sha256; the local shard is kept")
    return Put(wrote=wrote, took=took, verified=True)
