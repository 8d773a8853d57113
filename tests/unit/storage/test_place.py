"""One place for OUT and PREFIX: the only sniff of a URL, a local place that must be a directory, and a prefix
read as a directory of its records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tokenmill.errors import OutputError, StoreError
from tokenmill.storage.place import is_url, open_place, records_dir
from tokenmill.storage.prefix import DIR, MANIFEST, RemoteManifest
from tokenmill.storage.store import Store

SRC = Path(__file__).resolve().parents[3] / "src" / "tokenmill"


@pytest.mark.parametrize(
    ("target", "remote"),
    [("s3://bkt/run/", True), ("file:///tmp/x", True), ("gs://b/p", True), ("out/", False), ("./a:b", False),
     (Path("s3:/bkt"), False), ("/abs/dir", False)],
)  # fmt: skip
def test_is_url_tells_a_scheme_from_a_path(target: str | Path, remote: bool) -> None:
    assert is_url(target) is remote


def test_a_local_place_must_be_a_directory(tmp_path: Path) -> None:
    assert open_place(tmp_path).path == tmp_path
    with pytest.raises(OutputError, match="is not a directory"):
        open_place(tmp_path / "missing")


def test_a_prefix_is_read_as_a_directory_of_its_records_and_the_copy_goes_away(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    store = Store(prefix.as_uri())
    store.put_bytes_if_absent(MANIFEST, RemoteManifest("j1").encode())
    store.put_bytes_if_absent(f"{DIR}/job.json", b'{"job_id": "j1"}')
    store.put_bytes_if_absent(f"{DIR}/events.jsonl", b'{"kind": "tick"}\n')
    store.put_bytes_if_absent(f"{DIR}/other.bin", b"x")
    place = open_place(prefix.as_uri())
    assert place.remote
    with records_dir(place) as view:
        assert sorted(p.name for p in view.root.iterdir()) == ["events.jsonl", "job.json"]
        assert view.recorded == (0, 0)
        root = view.root
    assert not root.exists()


def test_a_prefix_without_a_job_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="holds no tokenmill job"), records_dir(open_place((tmp_path / "p").as_uri())):
        pass


def test_no_reader_sniffs_urls_itself() -> None:
    """Only the place (and the store, and the input side, which refuses URLs) tells a URL from a path."""
    allowed = {"storage/place.py", "storage/store.py", "sources/files.py", "config/base.py"}
    sniffs = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if re.search(r"""["']://["'] (not )?in """, p.read_text()) and str(p.relative_to(SRC)) not in allowed
    ]
    assert sniffs == []
