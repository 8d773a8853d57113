"""store.Store against a real S3 API (moto's server over loopback, through s3fs) and a local path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers.s3server import S3, write_file
from tokenmill.config import OutputSpec
from tokenmill.errors import StoreConflict, StoreError, StoreUnavailable
from tokenmill.storage.store import Store, check_name, display_url


def test_put_if_absent_never_replaces(s3: S3, tmp_path: Path) -> None:
    store = Store(s3.url(), s3.options())
    assert store.conditional
    first = write_file(tmp_path / "a.jsonl", b'{"id": 1}\n')
    other = write_file(tmp_path / "b.jsonl", b'{"id": 2}\n')
    assert store.put_file_if_absent(first, "completions_000000.jsonl") is True
    assert store.put_file_if_absent(other, "completions_000000.jsonl") is False
    assert store.put_bytes_if_absent("completions_000000.jsonl", b"other") is False
    assert s3.get("corpus/run-1/completions_000000.jsonl") == b'{"id": 1}\n'
    assert store.sha256("completions_000000.jsonl") == hashlib.sha256(b'{"id": 1}\n').hexdigest()
    assert store.sha256("nothing.jsonl") is None


def test_list_is_relative_recursive_and_scoped_to_the_prefix(s3: S3) -> None:
    s3.put("corpus/run-1/x.txt", b"12345")
    s3.put("corpus/run-1/deep/er/y.txt", b"1")
    s3.put("corpus/run-10/z.txt", b"1")  # a sibling prefix sharing the same start
    s3.put("elsewhere.txt", b"1")
    store = Store(s3.url(), s3.options())
    assert store.list() == {"x.txt": 5, "deep/er/y.txt": 1}
    assert store.size("x.txt") == 5
    assert store.size("nope") is None
    assert Store(s3.url("empty/"), s3.options()).list() == {}


@pytest.mark.parametrize("name", ["", "../x", "/abs", "a/../b", ".hidden", "a//b", "a/./b", "sp ace", "x\\y"])
def test_names_cannot_escape_the_prefix(s3: S3, name: str) -> None:
    store = Store(s3.url(), s3.options())
    with pytest.raises(StoreError, match="refusing object name"):
        check_name(name)
    with pytest.raises(StoreError, match="refusing object name"):
        store.put_bytes_if_absent(name, b"x")
    assert s3.objects() == {}


def test_replace_only_while_the_tag_still_matches(s3: S3) -> None:
    store = Store(s3.url(), s3.options())
    assert store.put_bytes_if_absent("_m.json", b"v1")
    seen = store.read("_m.json")
    assert seen is not None and seen.data == b"v1" and seen.tag
    s3.put("corpus/run-1/_m.json", b"changed by someone else")
    with pytest.raises(StoreConflict, match="changed by someone else while this job was updating it"):
        store.replace_bytes("_m.json", b"v2", seen.tag)
    assert s3.get("corpus/run-1/_m.json") == b"changed by someone else"
    fresh = store.read("_m.json")
    assert fresh is not None
    store.replace_bytes("_m.json", b"v2", fresh.tag)
    assert s3.get("corpus/run-1/_m.json") == b"v2"


def test_missing_bucket_and_server_down_are_clear_retryable_errors(own_s3: S3) -> None:
    s3 = own_s3
    gone = Store(f"s3://{s3.bucket}-missing/p/", s3.options())
    with pytest.raises(StoreUnavailable, match="check that the bucket exists") as info:
        gone.put_bytes_if_absent("a", b"x")
    assert info.value.retryable
    store = Store(s3.url(), s3.options())
    s3.stop()
    with pytest.raises(StoreUnavailable, match=r"list s3://tm-\w+/corpus/run-1/ failed: Could not connect"):
        store.list()
    s3.restart()
    assert store.list() == {}


def test_fault_hook_errors_are_translated_like_store_errors(s3: S3) -> None:
    calls: list[tuple[str, str]] = []

    def hook(op: str, name: str) -> None:
        calls.append((op, name))
        if len(calls) == 1:
            raise ConnectionResetError("connection reset by peer")

    store = Store(s3.url(), s3.options(), hook=hook)
    with pytest.raises(StoreUnavailable, match=r"put s3://.*/a\.txt failed: connection reset by peer"):
        store.put_bytes_if_absent("a.txt", b"x")
    assert store.put_bytes_if_absent("a.txt", b"x") is True
    assert calls == [("put", "a.txt"), ("put", "a.txt")]


def test_local_store_is_atomic_and_cleans_partials(tmp_path: Path) -> None:
    root = tmp_path / "remote"
    store = Store(f"file://{root}", {})
    assert store.conditional
    src = write_file(tmp_path / "s.jsonl", b"line\n")
    assert store.put_file_if_absent(src, "completions_000000.jsonl")
    assert not store.put_file_if_absent(write_file(tmp_path / "t", b"other\n"), "completions_000000.jsonl")
    assert (root / "completions_000000.jsonl").read_bytes() == b"line\n"
    write_file(root / ".tokenmill-part-completions_000001.jsonl.abc", b"half")  # what a SIGKILL leaves
    assert store.list() == {"completions_000000.jsonl": 5}  # a put in progress is no object (yet)
    assert len(store.list(partials=True)) == 2
    assert store.remove_partials() == 1
    assert store.list() == {"completions_000000.jsonl": 5}
    store.replace_bytes("_m.json", b"a", None)
    store.replace_bytes("_m.json", b"b", None)
    assert (root / "_m.json").read_bytes() == b"b"


def test_unknown_protocol_or_a_bare_path_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="nosuchproto"):
        Store("nosuchproto://bucket/p/", {})
    with pytest.raises(StoreError, match="is not a URL: write it with its protocol"):
        Store("my-bucket/prefix/", {})


def test_secrets_are_masked_when_the_spec_is_dumped() -> None:
    spec = OutputSpec(
        dir="out",
        remote="s3://b/p/",
        storage_options={"key": "AKIA1", "secret": "s3cr3t", "client_kwargs": {"endpoint_url": "http://h:1"}},
    )
    dumped = spec.model_dump(mode="json")
    assert dumped["storage_options"] == {"key": "***", "secret": "***", "client_kwargs": {"endpoint_url": "http://h:1"}}
    assert "s3cr3t" not in repr(dumped)
    assert spec.storage_options["secret"] == "s3cr3t"  # the live value is untouched
    assert display_url("az://user:pw@container/p/") == "az://container/p/"
