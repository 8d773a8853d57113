"""A prompt's samples (``samples: N``) gathered into one row, for ``export --samples grouped``, in bounded memory.

Each answer of a sampled job is its own record, ``{id}_gen{k}`` with ``primary_id`` and ``sample``; the record's
``sampling.samples`` says how many the prompt has. A group is written once all N of its answers came by (kept
or left out by the export's filters). The samples of one prompt are sent together and usually finish close
together, so few groups are open at a time; at most ``limit`` answers are held: past it the oldest group is
written as it is, and what is still open at the end is written too, each counted as incomplete (a later answer
of a group written early starts a row of its own).
"""

from __future__ import annotations

from typing import Any

from tokenmill.records.read import CompletionRecord, RecordId


def group_of(rec: CompletionRecord) -> tuple[str, int]:
    """(the prompt's canonical id, how many samples it has) of a completion record; (its id, 1) for an unsampled
    job's."""
    return rec.group_key, rec.samples


class SampleGroups:
    """Rows of ``{"id": <the prompt's id>, "answers": [<one row per answer, by sample>]}``, from answers taken in
    reading order; :meth:`take` hands out the rows that are ready."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._open: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # prompt key -> (sample, row), oldest first
        self._ids: dict[str, RecordId] = {}  # prompt key -> its id as the input gave it (the row's "id")
        self._seen: dict[str, int] = {}  # prompt id -> its answers come by so far (kept or left out)
        self._want: dict[str, int] = {}  # prompt id -> its samples
        self._held = 0
        self._ready: list[dict[str, Any]] = []
        self.written = 0  # rows written
        self.incomplete = 0  # of them, with fewer answers than the prompt's samples

    def add(self, rec: CompletionRecord, row: dict[str, Any] | None) -> None:
        """One answer come by: ``row`` its exported row, None when the export leaves it out."""
        key, want = group_of(rec)
        answers = self._open.setdefault(key, [])
        self._ids.setdefault(key, rec.id if rec.primary_id is None else rec.primary_id)
        if row is not None:
            answers.append((rec.sample or 0, row))
            self._held += 1
        self._want[key] = want
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if seen >= want:
            self._write(key)
        while self._held > self.limit:
            self._write(next(iter(self._open)))

    def left_out(self, rec: CompletionRecord) -> None:
        """An answer the export leaves out: it still counts towards its group's being complete."""
        self.add(rec, None)

    def finish(self) -> None:
        """Write the groups still open (each incomplete)."""
        while self._open:
            self._write(next(iter(self._open)))

    def take(self) -> list[dict[str, Any]]:
        """The rows ready since the last call."""
        ready, self._ready = self._ready, []
        return ready

    def _write(self, key: str) -> None:
        answers = self._open.pop(key)
        rid = self._ids.pop(key, key)
        self._seen.pop(key, None)
        want = self._want.pop(key)
        self._held -= len(answers)
        if not answers:
            return  # every answer left out: no row
        self.written += 1
        self.incomplete += len(answers) < want
        self._ready.append({"id": rid, "answers": [row for _, row in sorted(answers, key=lambda a: a[0])]})
