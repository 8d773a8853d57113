"""Hugging Face datasets: a local dataset directory streamed through ``input.hf``, and offline failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenmill.config import InputSpec
from tokenmill.errors import InputError
from tokenmill.records import Prompt
from tokenmill.sources import count_rows, iter_prompts

datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No network here: fail fast instead of retrying the Hub, and keep cache files in the test's tmp dir."""
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def _dataset_dir(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    root = tmp_path / "my-dataset"
    root.mkdir()
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_local_dataset_directory_streams_through_datasets(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"conversations": [{"from": "human", "value": f"q{i}"}], "uid": f"u{i}"} for i in range(5)
    ]
    root = _dataset_dir(tmp_path, rows)
    spec = InputSpec.model_validate({"hf": {"dataset": str(root)}, "id_field": "uid", "offset": 1, "limit": 3})
    items = list(iter_prompts(spec))
    assert all(isinstance(i, Prompt) for i in items)
    assert [(i.id, i.source) for i in items] == [(f"u{n}", f"{root}[train]:{n}") for n in (1, 2, 3)]
    first = items[0]
    assert isinstance(first, Prompt) and first.messages == [{"role": "user", "content": "q1"}]


def test_default_ids_count_from_the_split_start(tmp_path: Path) -> None:
    root = _dataset_dir(tmp_path, [{"prompt": f"p{i}"} for i in range(4)])
    items = list(iter_prompts(InputSpec.model_validate({"hf": {"dataset": str(root)}, "offset": 2})))
    assert [(i.id, getattr(i, "text", None)) for i in items] == [("2", "p2"), ("3", "p3")]


def test_unknown_dataset_id_offline_is_a_clear_input_error() -> None:
    spec = InputSpec.model_validate({"hf": {"dataset": "no-such-org/no-such-dataset"}})
    with pytest.raises(InputError) as caught:
        list(iter_prompts(spec))
    message = str(caught.value)
    assert message.startswith("dataset no-such-org/no-such-dataset, split 'train' could not be loaded: ")
    assert message.endswith("check the id, config and split, or download it and give input.path")


def test_unknown_split_names_the_split(tmp_path: Path) -> None:
    root = _dataset_dir(tmp_path, [{"prompt": "p"}])
    spec = InputSpec.model_validate({"hf": {"dataset": str(root), "split": "test"}})
    with pytest.raises(InputError, match=r"split 'test' could not be loaded: .*Bad split: test"):
        list(iter_prompts(spec))


def test_a_file_that_breaks_mid_stream_names_the_row(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    root.mkdir()
    (root / "train.jsonl").write_text('{"prompt": "a"}\n{"prompt": oops\n')
    spec = InputSpec.model_validate({"hf": {"dataset": str(root)}})
    with pytest.raises(InputError, match=r"broken\[train\]:0: the dataset cannot be read past this row"):
        list(iter_prompts(spec))


def test_count_rows_is_unknown_without_split_metadata(tmp_path: Path) -> None:
    root = _dataset_dir(tmp_path, [{"prompt": "p"}])
    assert count_rows(InputSpec.model_validate({"hf": {"dataset": str(root)}})) is None
