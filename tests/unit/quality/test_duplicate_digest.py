"""Duplicates are found by a hash the corpus reader computes from each record's final answer, so a record
written with a stored ``quality.answer_hash`` (earlier versions) and one written without (now) that give the
same answer are one duplicate group, and a stored hash that disagrees with the answer changes nothing."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.factories import completion
from tokenmill.export import ExportOptions, export
from tokenmill.output import OutputDir
from tokenmill.quality.corpus import inspect_output
from tokenmill.quality.signals import answer_hash, signals

SAME = "The capital of France is Paris, a city on the Seine with about two million people."
OTHER = "Madrid is the capital of Spain, on the Manzanares, and its largest city by population."


def _corpus(root: Path) -> None:
    od = OutputDir(root, shard_size=10)
    od.open()
    old = completion("old", completion=SAME)  # as an earlier version wrote it: the hash stored
    old.quality = {**signals(SAME, "stop").as_dict(), "answer_hash": answer_hash(SAME)}
    od.write(old)
    od.write(completion("new", completion=" " + SAME + "\n"))  # written now: no stored hash
    stale = completion("stale", completion=OTHER)  # a stored hash that names another answer
    stale.quality = {**signals(OTHER, "stop").as_dict(), "answer_hash": answer_hash(SAME)}
    od.write(stale)
    od.write(completion("think", completion="<think>Spain, then.</think>" + OTHER))  # the same final answer
    od.close(seal=True)


def test_inspect_groups_records_of_both_ages_by_their_final_answer(tmp_path: Path) -> None:
    _corpus(tmp_path / "out")
    quality = inspect_output(tmp_path / "out")
    assert quality.duplicates == 2
    groups = sorted(quality.duplicate_groups.values())
    assert groups == [["old", "new"], ["stale", "think"]]
    assert set(quality.duplicate_groups) == {answer_hash(SAME), answer_hash(OTHER)}


def test_export_drops_the_later_copy_whatever_the_record_stored(tmp_path: Path) -> None:
    _corpus(tmp_path / "out")
    dest = tmp_path / "train.jsonl"
    counts = export(tmp_path / "out", dest, ExportOptions(format="sharegpt", drop=("duplicate",)))
    assert counts.kept == 2 and sum(counts.dropped.values()) == 2
    kept = [line.split(b'"id":"')[1].split(b'"')[0].decode() for line in dest.read_bytes().splitlines()]
    assert sorted(kept) == ["old", "stale"]
