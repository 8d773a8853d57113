"""Autotune's result kept: the flags a fleet ends on written to PROFILE.tuned.yaml beside the profile, the diff said,
and the file a profile ``fleet up`` reads as it reads any other."""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path

import pytest
import yaml

from tokenmill.autotune.actuators import profile_with
from tokenmill.autotune.loop import Change
from tokenmill.autotune.measure import Measurement
from tokenmill.autotune.tuned import KeptChange, flag_diff, keep_tuned, newer_tuned, tuned_path
from tokenmill.config import load_profile
from tokenmill.run.with_fleet import write_kept

CHANGE = "--disable-radix-cache --max-running-requests 96"
NOW = datetime.datetime(2026, 12, 2, 19, 0, tzinfo=datetime.UTC)


def profile_file(tmp: Path) -> Path:
    path = tmp / "fleet.yaml"
    path.write_text(
        "# my fleet\n"
        + yaml.safe_dump(
            {
                "engine": "sglang",
                "model": "Qwen/Qwen3.6-27B",
                "gpus": 4,
                "state_dir": str(tmp / "state"),
                "flags": {"mem-fraction-static": 0.85, "max-running-requests": 32},
                "autotune": {"max_changes": 2},
            }
        )
    )
    return path


def test_the_kept_flags_are_written_beside_the_profile_and_a_fleet_started_from_it_runs_them(tmp_path: Path) -> None:
    path = profile_file(tmp_path)
    profile = load_profile(path)
    final = profile_with(profile, CHANGE)  # what the fleet runs after the roll-out
    tuned = keep_tuned(path, final.flags, [KeptChange(CHANGE, 2.1, 1.8)], now=NOW)
    assert tuned is not None and tuned.path == tmp_path / "fleet.tuned.yaml"
    assert tuned.diff == ["- --max-running-requests 32", "+ --max-running-requests 96", "+ --disable-radix-cache"]
    back = load_profile(tuned.path)  # what `fleet up fleet.tuned.yaml` reads
    assert back.flags == {"mem-fraction-static": 0.85, "max-running-requests": 96, "disable-radix-cache": True}
    assert back.model_dump(exclude={"flags"}) == profile.model_dump(exclude={"flags"})  # nothing else moved
    text = tuned.path.read_text()
    assert f"# kept: {CHANGE} (predicted +210%, measured +180%)" in text
    assert path.read_text().startswith("# my fleet\n")  # the profile itself is left as written
    assert load_profile(path).flags == profile.flags
    assert tuned.lines()[-1] == f"start the fleet with them: tokenmill fleet up {tuned.path}"


def test_nothing_is_written_when_the_fleet_ends_on_the_profile_s_flags(tmp_path: Path) -> None:
    path = profile_file(tmp_path)
    assert keep_tuned(path, load_profile(path).flags, []) is None
    assert not tuned_path(path).exists()


def test_write_kept_takes_only_kept_changes_and_says_the_diff(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = profile_file(tmp_path)
    final = profile_with(load_profile(path), CHANGE)
    m = Measurement(100.0, 250.0, 100.0, 100.0, gain=1.5, stderr=0.1, gain_self=1.5, gain_vs_peers=1.5, seconds=60)
    back = Change("--max-running-requests 48", "kv_bound", "http://a", ["http://b"], 0.3, 0.0, outcome="rolled back")
    dry = Change("--schedule-conservativeness 0.5", "x", "http://a", [], 0.2, 0.0, dry_run=True, outcome="would apply")
    kept = Change(CHANGE, "state_bound", "http://a", ["http://b"], 2.0, 0.0, measured=m, outcome="kept")
    with caplog.at_level(logging.WARNING, logger="tokenmill.fleet"):
        write_kept(path, dict(load_profile(path).flags), [back, dry])
        assert not tuned_path(path).exists()  # nothing kept: nothing written
        write_kept(path, final.flags, [back, dry, kept])
    text = tuned_path(path).read_text()
    assert "# kept: --disable-radix-cache --max-running-requests 96 (predicted +200%, measured +150%)" in text
    assert "rolled back" not in text and "schedule-conservativeness" not in text
    said = caplog.text
    assert "+ --max-running-requests 96" in said and "tokenmill fleet up " in said


def test_a_tuned_profile_is_tuned_again_in_place_and_is_noticed_only_when_newer(tmp_path: Path) -> None:
    path = profile_file(tmp_path)
    assert newer_tuned(path) is None
    tuned = keep_tuned(path, profile_with(load_profile(path), CHANGE).flags, [KeptChange(CHANGE, 1.0, None)])
    assert tuned is not None and newer_tuned(path) == tuned.path
    assert tuned_path(tuned.path) == tuned.path
    old = path.stat().st_mtime
    os.utime(tuned.path, (old - 60, old - 60))  # the profile edited since
    assert newer_tuned(path) is None


def test_flag_diff_names_removed_changed_and_added_flags() -> None:
    assert flag_diff({"a": 1, "b": True, "c": "x"}, {"a": 2, "c": "x", "d": True}) == [
        "- --a 1",
        "+ --a 2",
        "- --b",
        "+ --d",
    ]
