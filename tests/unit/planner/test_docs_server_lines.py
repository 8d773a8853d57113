"""Every server command line README.md and docs/*.md recommend is one the planner accepts for the hardware they name:
each is read out of the pages' code blocks (so a later edit is checked too) and run through ``tokenmill plan``.

What counts as a server command line, and where its hardware comes from:
- ``python -m sglang.launch_server ...``: the flags after ``--model-path``; the hardware and workload from the
  ```tokenmill plan ...``` the line's comment (or the comment line right above it) names in backticks, which must
  plan the same model — a launch line that names no plan fails this test;
- ``tokenmill sim ... --gpu G``: the twin's SGLang flags, on G;
- ``tokenmill plan|calibrate ... --flags "..."``: the flags, on its ``-m``/``-g``;
- a fleet profile (a YAML block with ``engine:`` and ``flags:``): through ``plan --fleet``, with the ``tokenmill
  plan --fleet fleet.yaml ...`` a comment in the block names (a profile of real servers does not say its GPU).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.cli.sim import build_config, sim

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE_OPTIONS = {"--job", "--fleet", "--dataset", "--tokenizer", "--gpu-file"}
# launch_server options that say where and what it serves, not how it is sized (the planner plans the rest)
NOT_SIZING = {"--model-path", "--host", "--port", "--served-model-name", "--api-key", "--reasoning-parser"}


@dataclass(frozen=True)
class Line:
    page: str
    lineno: int
    kind: str  # launch | sim | plan | fleet
    text: str
    comment: str  # the line's comment and the comment line above it

    def __str__(self) -> str:
        return f"{self.page}:{self.lineno}: {self.text}"


def server_lines() -> list[Line]:
    found: list[Line] = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.finditer(text):
            lang, body = block.group(1), block.group(2)
            start = text[: block.start(2)].count("\n") + 1
            name = str(page.relative_to(ROOT))
            if lang == "yaml":
                found += _profiles(name, start, body)
            elif lang in ("", "bash", "sh", "console"):
                found += _commands(name, start, body)
    return found


def _profiles(page: str, start: int, body: str) -> list[Line]:
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError:
        return []
    if not isinstance(data, dict) or "engine" not in data or not data.get("flags"):
        return []
    return [Line(page, start, "fleet", body, "\n".join(re.findall(r"#\s*(.*)", body)))]


def _commands(page: str, start: int, body: str) -> list[Line]:
    out: list[Line] = []
    above, raw, i = "", body.splitlines(), 0
    while i < len(raw):
        lineno, full = start + i, raw[i]
        while full.rstrip().endswith("\\") and i + 1 < len(raw):  # a continued command: one line, the first's number
            i += 1
            full = full.rstrip()[:-1] + " " + raw[i].strip()
        i += 1
        stripped = full.strip()
        if stripped.startswith("#"):
            above = stripped.lstrip("#").strip()
            continue
        command, _, comment = stripped.partition(" #")
        kind = _kind(command.strip())
        if kind is not None:
            out.append(Line(page, lineno, kind, command.strip(), f"{above}\n{comment}"))
        above = ""
    return out


def _kind(command: str) -> str | None:
    if "sglang.launch_server" in command:
        return "launch"
    if command.startswith("tokenmill sim ") and " --gpu " in f"{command} ":
        return "sim"
    if command.startswith(("tokenmill plan ", "tokenmill calibrate ")) and "--flags" in command:
        return "plan"
    return None


def plan(*args: str) -> dict[str, object]:
    res = CliRunner().invoke(cli, ["plan", *args, "--no-what-if", "--json"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    data: dict[str, object] = json.loads(res.output)
    return data


def plan_named(comment: str, line: Line) -> list[str]:
    """The ``tokenmill plan ...`` a line's comment names (its arguments), or a failure saying to name one."""
    found = re.search(r"`tokenmill plan ([^`]*)`", comment)
    assert found, f"{line}: name the plan these flags come from in a comment (# `tokenmill plan -m MODEL -g GPU ...`)"
    return shlex.split(found.group(1))


def accepted(line: Line, tmp: Path) -> dict[str, object]:
    """Plan ``line`` for the hardware it names; the plan's JSON (the test fails when the planner refuses it)."""
    if line.kind == "fleet":
        profile = tmp / "fleet.yaml"
        profile.write_text(line.text)
        return plan(*[str(profile) if a == "fleet.yaml" else a for a in plan_named(line.comment, line)])
    words = shlex.split(line.text)
    if line.kind == "launch":
        args = plan_named(line.comment, line)
        model = words[words.index("--model-path") + 1].rsplit("/", 1)[-1].lower()
        named = args[args.index("-m") + 1] if "-m" in args else args[args.index("--planner-model") + 1]
        assert named.lower() == model, f"{line}: the comment plans {named}, the line serves {model}"
        flags, skip = [], False
        for word in words[words.index("sglang.launch_server") + 1 :]:
            if skip:
                skip = False
            elif word in NOT_SIZING:
                skip = True
            elif word != "--enable-metrics":
                flags.append(word)
        return plan(*args, "--flags", shlex.join(flags))
    if line.kind == "sim":
        ctx = sim.make_context("sim", words[2:])
        given = {k: v for k, v in ctx.params.items() if k not in ("config_file", "port_file")}
        cfg = build_config(None, given, ctx.args)
        model = cfg.model_spec or cfg.model
        if model.endswith(".json") and not Path(model).exists():
            pytest.skip(f"{line}: the model is a config.json of the reader's own")
        return plan("-m", model, "-g", str(cfg.gpu), "--flags", cfg.engine_flags)
    # tokenmill plan | calibrate ... --flags "...": what needs a file, a server or a second GPU is left out
    if words[words.index("--flags") + 1] == "...":
        pytest.skip(f"{line}: a placeholder for the server's own flags")
    keep: list[str] = []
    it = iter(words[2:])
    for word in it:
        if word in FILE_OPTIONS or word in ("--server", "--window", "--interval", "--samples", "--compare"):
            next(it, None)
        else:
            keep.append(word)
    return plan(*keep)


LINES = server_lines()


def test_the_docs_recommend_server_command_lines_and_name_their_hardware() -> None:
    kinds = {line.kind for line in LINES}
    assert {"launch", "sim", "plan", "fleet"} <= kinds, [str(line) for line in LINES]


@pytest.mark.parametrize("line", LINES, ids=[f"{line.page}:{line.lineno}" for line in LINES])
def test_every_server_command_line_in_the_docs_is_one_the_planner_accepts(line: Line, tmp_path: Path) -> None:
    data = accepted(line, tmp_path)
    assert "error" not in data, f"{line}: {data.get('error')}"
    assert data["plan"]["running"] >= 1  # type: ignore[index]
