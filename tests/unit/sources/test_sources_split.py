"""Splitting the input between partitions: whole files when there are many (another partition's files never
decoded, row indexes kept), ids hashed otherwise; --partition I/N and the schedulers' index variables."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tokenmill.config import InputSpec, PartitionSpec
from tokenmill.errors import ConfigError
from tokenmill.records import Prompt, Skip
from tokenmill.sources import count_rows, iter_prompts
from tokenmill.sources.partition import Split, choose_split, parse_partition, partition_of


def write_files(root: Path, files: int, rows: int, with_ids: bool = True) -> Path:
    root.mkdir()
    for f in range(files):
        lines = []
        for r in range(rows):
            row = {"prompt": f"q {f} {r}"} | ({"id": f"f{f}-{r}"} if with_ids else {})
            lines.append(orjson.dumps(row))
        if f == 2:
            lines.insert(1, b"{not json")  # a bad row in file 2
        (root / f"part-{f:02d}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return root


def spec(root: Path, **fields: object) -> InputSpec:
    return InputSpec.model_validate({"path": str(root), "on_bad_row": "skip", **fields})


def prompts(items: list[Prompt | Skip]) -> list[str]:
    return [p.id for p in items if isinstance(p, Prompt)]


def test_auto_splits_by_files_only_when_there_are_enough_of_them(tmp_path: Path) -> None:
    root = write_files(tmp_path / "d", 8, 3)
    how = PartitionSpec(min_files_per_partition=4)
    assert choose_split(spec(root), how, 0, 2).by == "files"  # 8 files >= 4 per partition
    assert choose_split(spec(root), how, 0, 3).by == "ids"
    assert choose_split(spec(root), PartitionSpec(by="files"), 2, 3).by == "files"
    with pytest.raises(ConfigError, match="partition 3 of 3 does not exist"):
        choose_split(spec(root), how, 3, 3)
    hf = InputSpec.model_validate({"hf": {"dataset": "x/y"}})
    assert choose_split(hf, how, 0, 2).by == "ids"
    with pytest.raises(ConfigError, match="split it by ids"):
        choose_split(hf, PartitionSpec(by="files"), 0, 2)


def test_whole_files_go_to_partitions_and_the_others_files_are_never_decoded(tmp_path: Path) -> None:
    root = write_files(tmp_path / "d", 6, 4)
    whole = iter_prompts(spec(root, id_field="id"))
    parts = [list(iter_prompts(spec(root, id_field="id"), Split(i, 3, "files"))) for i in range(3)]
    assert sorted(i for part in parts for i in prompts(part)) == sorted(prompts(list(whole)))
    for i, part in enumerate(parts):
        assert {int(rid.split("-")[0][1:]) % 3 for rid in prompts(part)} == {i}
    skips = [p for part in parts for p in part if isinstance(p, Skip)]
    assert len(skips) == 1 and "part-02" in skips[0].source and skips[0] in parts[2]  # its file's owner
    (root / "part-01.jsonl").write_bytes(b"\x00not even text\n")  # partition 0 does not open partition 1's file
    assert prompts(list(iter_prompts(spec(root, id_field="id"), Split(0, 3, "files")))) == prompts(parts[0])


def test_row_index_ids_and_windows_stay_global_when_files_are_split(tmp_path: Path) -> None:
    root = write_files(tmp_path / "d", 4, 5, with_ids=False)
    for window in ({}, {"offset": 3, "limit": 11}):
        whole = {p.id: p.text for p in iter_prompts(spec(root, id_field=None, **window)) if isinstance(p, Prompt)}
        split = {}
        for i in range(2):
            for p in iter_prompts(spec(root, id_field=None, **window), Split(i, 2, "files")):
                if isinstance(p, Prompt):
                    split[p.id] = p.text
        assert split == whole  # the same ids for the same rows, the window cut the same
    assert count_rows(spec(root, id_field=None), Split(1, 2, "files")) == 10  # its own files only: 1 and 3


def test_ids_are_hashed_when_split_by_ids(tmp_path: Path) -> None:
    root = write_files(tmp_path / "d", 2, 20)
    parts = [prompts(list(iter_prompts(spec(root, id_field="id"), Split(i, 3, "ids")))) for i in range(3)]
    for i, part in enumerate(parts):
        assert part and all(partition_of(rid, 3) == i for rid in part)
    assert sum(map(len, parts)) == 40


def test_partition_from_the_command_line_and_the_schedulers() -> None:
    assert parse_partition("2/4", {}) == (2, 4)
    slurm = {"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert parse_partition("slurm", slurm) == (2, 4)
    assert parse_partition("slurm/8", {"SLURM_ARRAY_TASK_ID": "7"}) == (7, 8)
    assert parse_partition("k8s/3", {"JOB_COMPLETION_INDEX": "0"}) == (0, 3)
    for text, env, said in [
        ("4/4", {}, "partition 4 of 4 does not exist"),
        ("k8s", {"JOB_COMPLETION_INDEX": "1"}, "give the number of partitions too"),
        ("k8s/3", {}, "JOB_COMPLETION_INDEX is not set"),
        ("one/3", {}, "whole number"),
    ]:
        with pytest.raises(ConfigError, match=said):
            parse_partition(text, env)
