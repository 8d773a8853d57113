"""``verify``: every kind of problem is found, counted, listed with a cap, and rendered."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers import factories
from tokenmill.errors import OutputError
from tokenmill.output import OutputDir, verify
from tokenmill.output.verify import LISTED_PER_KIND
from tokenmill.records import Completion, Failure, Skip


def completion(i: int) -> Completion:
    return factories.completion(f"p{i}", completion=f"text {i}")


def failure(i: int) -> Failure:
    return factories.failure(f"p{i}", error_type="E", error="e", http_status=None, server=None, finished_at=0)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """Six completions in two sealed shards, one in an open shard, one failure, one skip."""
    writer = OutputDir(tmp_path, shard_size=3)
    writer.open()
    for i in range(7):
        writer.write(completion(i))
    writer.fail(failure(7))
    writer.skip(Skip(source="in.jsonl:9", reason="bad", id="p9"))
    writer.close(seal=False)
    return tmp_path


INPUT = [f"p{i}" for i in (0, 1, 2, 3, 4, 5, 6, 7, 9)]  # p9 is the skipped row


def test_a_clean_directory_is_ok(out: Path) -> None:
    report = verify(out, [*INPUT[:8], Skip(source="in.jsonl:9", reason="bad")])
    assert report.ok, report.render()
    assert report.counts["sealed_shards"] == 2
    assert report.counts["sealed_records"] == 6
    assert report.counts["open_records"] == 1
    assert report.counts["failed"] == 1
    assert report.counts["skipped"] == 1
    assert report.counts["input_ids"] == 8
    assert report.counts["input_skipped"] == 1
    assert "OK: every sealed shard matches the manifest" in report.render()
    assert any("completions_000002.jsonl.open is open with 1 completions" in n for n in report.notes)


def test_an_input_id_recorded_as_skipped_counts(out: Path) -> None:
    # p9 was skipped by the run; the input (now readable) yields it as an id
    assert verify(out, INPUT).ok


def test_a_changed_byte_in_a_sealed_shard_is_a_checksum_mismatch(out: Path) -> None:
    path = out / "completions_000001.jsonl"
    path.write_bytes(path.read_bytes().replace(b"text 4", b"TEXT 4"))
    report = verify(out)
    assert not report.ok
    assert report.totals == {"mismatch": 1}
    assert report.problems[0].where == "completions_000001.jsonl"
    assert report.problems[0].detail == "differs from its manifest line in sha256"


def test_an_appended_line_changes_count_bytes_and_ids(out: Path) -> None:
    path = out / "completions_000000.jsonl"
    size = path.stat().st_size
    extra = orjson.dumps(completion(42), option=orjson.OPT_APPEND_NEWLINE)
    with path.open("ab") as fh:
        fh.write(extra)
    report = verify(out)
    assert report.totals == {"mismatch": 1}
    detail = report.problems[0].detail
    assert "sha256" in detail
    assert "count (4 on disk, 3 in the manifest)" in detail
    assert f"bytes ({size + len(extra)} on disk, {size} in the manifest)" in detail
    assert detail.endswith("ids")


def test_unreadable_lines_and_torn_lines_are_reported(out: Path) -> None:
    with (out / "failed.jsonl").open("ab") as fh:
        fh.write(b"{oops\n")
    with (out / "completions_000002.jsonl.open").open("ab") as fh:
        fh.write(b'{"id": "p8", "sta')
    report = verify(out)
    assert report.totals == {"bad-line": 1, "torn": 1}
    assert {(p.kind, p.where, p.detail) for p in report.problems} == {
        ("bad-line", "failed.jsonl", "line 2: not valid JSON"),
        ("torn", "completions_000002.jsonl.open", "torn last line (17 bytes)"),
    }


def test_duplicates_across_shards_and_failures_are_reported(out: Path) -> None:
    with (out / "failed.jsonl").open("ab") as fh:
        fh.write(orjson.dumps(failure(1), option=orjson.OPT_APPEND_NEWLINE))
    report = verify(out, INPUT)
    assert report.totals == {"duplicate": 1}
    assert report.counts["duplicates"] == 1
    assert report.problems[0].detail == "id 'p1' was already recorded"


def test_missing_and_unexpected_ids_against_the_input(out: Path) -> None:
    report = verify(out, ["p0", "p1", "p2", "p3", "p4", "p5", "p7", "p9", "p10", "p11"])
    assert report.totals == {"missing": 2, "unexpected": 1}
    assert report.counts["missing"] == 2
    assert report.counts["unexpected"] == 1
    assert {p.detail for p in report.problems} == {"id 'p10'", "id 'p11'", "id 'p6'"}


def test_an_input_that_now_skips_a_completed_row_says_so(out: Path) -> None:
    items: list[str | Skip] = [*INPUT[:6], Skip(source="in.jsonl:6", reason="bad", id="p6"), "p7", "p9"]
    report = verify(out, items)
    assert report.totals == {"unexpected": 1}
    assert report.problems[0].detail == "id 'p6' (the input now skips that row)"


def test_repeated_input_ids_are_a_note_not_a_problem(out: Path) -> None:
    report = verify(out, [*INPUT, "p0", "p1"])
    assert report.ok
    assert report.counts["input_repeats"] == 2
    assert any("repeats 2 id(s)" in n for n in report.notes)


def test_listing_is_capped_but_totals_count_everything(out: Path) -> None:
    many = [*INPUT, *(f"extra{i}" for i in range(LISTED_PER_KIND + 15))]
    report = verify(out, many)
    assert report.totals == {"missing": LISTED_PER_KIND + 15}
    assert len(report.problems) == LISTED_PER_KIND
    assert "... and 15 more" in report.render()
    assert f"NOT OK: {LISTED_PER_KIND + 15} problems" in report.render()


def test_manifest_problems(out: Path) -> None:
    lines = (out / "manifest.jsonl").read_bytes().splitlines(keepends=True)
    (out / "manifest.jsonl").write_bytes(lines[0] + lines[0] + b"junk\n")
    report = verify(out)
    assert report.totals == {"manifest-line": 2, "unindexed": 1}
    (out / "completions_000000.jsonl").unlink()
    report = verify(out)
    assert report.totals["missing-shard"] == 1


def test_a_missing_manifest_is_a_note_and_each_shard_unindexed(out: Path) -> None:
    (out / "manifest.jsonl").unlink()
    report = verify(out)
    assert report.totals == {"unindexed": 2}
    assert any("manifest.jsonl is missing" in n for n in report.notes)


def test_several_open_shards_are_a_layout_problem(out: Path) -> None:
    (out / "completions_000005.jsonl.open").write_bytes(b"")
    assert verify(out).totals == {"layout": 1}


def test_json_form_round_trips(out: Path) -> None:
    report = verify(out, ["p0"])
    data = orjson.loads(orjson.dumps(report.to_dict()))
    assert data["ok"] is False
    assert data["problem_totals"] == {"unexpected": 7}
    assert data["counts"]["input_ids"] == 1
    assert data["checked_input"] is True
    assert len(data["problems"]) == 7


def test_verify_does_not_change_the_directory(out: Path) -> None:
    with (out / "completions_000002.jsonl.open").open("ab") as fh:
        fh.write(b"torn")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    verify(out, INPUT)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_missing_directory_is_an_output_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is not an output directory"):
        verify(tmp_path / "nope")


def test_archived_failures_are_history_and_only_noted(out: Path) -> None:
    (out / "failed.retry-1.jsonl").write_bytes(b"anything, not checked\n")
    report = verify(out, INPUT)
    assert report.ok
    assert any("1 failed.retry-N.jsonl file(s)" in n for n in report.notes)
