"""The export formats' table drives what it names: the CLI's --format choices, the default file names, the writer
each format runs, the grouped check and the docs' table; the renamed length filters keep their old spellings."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.helpers.factories import completion
from tokenmill.cli import cli
from tokenmill.errors import ConfigError
from tokenmill.export import ExportOptions, export
from tokenmill.export.formats import FORMATS, NAMES, format_of, grouped_formats
from tokenmill.output import OutputDir

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    root = tmp_path / "out"
    od = OutputDir(root, shard_size=10)
    od.open()
    od.write(completion("short", completion="a b", completion_tokens=2))
    od.write(completion("long", completion="a b c d e f", completion_tokens=6))
    od.close(seal=True)
    return root


def test_the_cli_offers_the_table_s_formats() -> None:
    command = cli.get_command(None, "export")  # type: ignore[arg-type]
    choices = next(p for p in command.params if p.name == "fmt").type.choices  # type: ignore[union-attr]
    assert tuple(choices) == NAMES == tuple(f.name for f in FORMATS)


@pytest.mark.parametrize("name", ["sharegpt", "parquet"])
def test_the_default_file_is_named_by_the_table(out: Path, name: str) -> None:
    result = CliRunner().invoke(cli, ["export", str(out), "--format", name])
    assert result.exit_code == 0, result.output
    dest = out / format_of(name).default_name
    assert dest.exists() and f"{dest}: wrote 2 of 2" in result.output
    if name == "parquet":
        assert pq.read_table(dest).num_rows == 2
    else:
        assert [orjson.loads(line)["id"] for line in dest.read_bytes().splitlines()] == ["short", "long"]


def test_every_format_has_a_writer_and_a_row() -> None:
    for f in FORMATS:
        assert f.writer in ("lines", "tokens", "parquet", "dataset") and f.docs and f.ext
        assert (f.shape is None) == (f.writer == "tokens"), f.name  # the token rows come from their own builder


def test_only_the_table_s_groupable_formats_group(out: Path, tmp_path: Path) -> None:
    assert grouped_formats() == ["sharegpt", "openai-messages", "specforge"]
    with pytest.raises(ConfigError, match=r"\(sharegpt, openai-messages, specforge\), not parquet"):
        export(out, tmp_path / "x.parquet", ExportOptions(format="parquet", samples="grouped"))
    with pytest.raises(ConfigError, match="unknown export format 'csv'; choose one of sharegpt"):
        export(out, tmp_path / "x.csv", ExportOptions(format="csv"))


def test_the_docs_table_lists_every_format() -> None:
    page = (ROOT / "docs" / "quality.md").read_text()
    table = page.split("<!-- export-formats:start -->")[1].split("<!-- export-formats:end -->")[0]
    for f in FORMATS:
        assert f"| `{f.name}` | `{f.default_name}` |" in table


def test_the_length_filter_is_max_completion_tokens_and_the_old_spelling_warns(out: Path, tmp_path: Path) -> None:
    new = CliRunner().invoke(
        cli, ["export", str(out), "--format", "sharegpt", "--to", str(tmp_path / "a"), "--max-completion-tokens", "3"]
    )
    assert new.exit_code == 0, new.output
    assert "left out 1: more than 3 completion tokens" in new.output and "deprecated" not in new.output
    old = CliRunner().invoke(cli, ["export", str(out), "--format", "sharegpt", "--to", str(tmp_path / "b"),
                                   "--max-tokens", "3"])  # fmt: skip
    assert old.exit_code == 0, old.output
    assert "warning: --max-tokens is deprecated here, it is now --max-completion-tokens" in old.stderr
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    low = CliRunner().invoke(cli, ["export", str(out), "--format", "sharegpt", "--to", str(tmp_path / "c"),
                                   "--min-tokens", "3"])  # fmt: skip
    assert "it is now --min-completion-tokens" in low.stderr and "left out 1: fewer than 3" in low.stdout
    helped = CliRunner().invoke(cli, ["export", "--help"]).output
    assert "--max-completion-tokens" in helped and "--max-tokens" not in helped
