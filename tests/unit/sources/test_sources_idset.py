"""The compact id set used to find duplicate ids."""

from __future__ import annotations

from tokenmill.sources.idset import IdSet


def test_add_reports_duplicates_across_growth() -> None:
    ids = IdSet()
    n = 20_000  # several doublings from the initial 4,096 slots
    assert all(ids.add(f"id-{i}") for i in range(n))
    assert len(ids) == n
    assert not any(ids.add(f"id-{i}") for i in range(0, n, 7))
    assert len(ids) == n
    assert ids.add("id-new")
    assert not ids.add("id-new")


def test_empty_and_unicode_strings_are_distinct_members() -> None:
    ids = IdSet()
    assert ids.add("") and ids.add("é") and ids.add("e")
    assert not ids.add("é")
    assert len(ids) == 3
