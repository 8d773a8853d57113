"""Citations a newcomer can follow: every reference page the code, the bundled configs and the docs cite is in the
repository (docs/reference/), every section cited is a heading there, and every source tag cited is in a page's
list of sources."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
CITE = re.compile(r"(?P<path>[\w./-]*?)(?P<page>hardware|sglang)\.md(?: ?(?:§|\\u00a7)(?P<section>\d+(?:\.\d+)?))?")
TAG = re.compile(r"\[((?:S|M)(?:-[A-Z0-9]+|\d+b?))\]")
SUFFIXES = {".py", ".md", ".json", ".yaml", ".yml"}


def _files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    for top in ("src", "docs", "tests", "scripts", "examples"):
        found += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return [p for p in found if p.exists() and p != Path(__file__)]


def _headings(page: Path) -> set[str]:
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\. ", page.read_text(), flags=re.M)) | set(
        re.findall(r"^#{2,3} (\d+\.\d+) ", page.read_text(), flags=re.M)
    )


def _misdirected(path: Path, text: str) -> list[str]:
    """The citations in ``text`` (of the file at ``path``) that name no reference page or no section of one."""
    bad = []
    for m in CITE.finditer(text):
        target = REFERENCE / f"{m['page']}.md"
        names = {
            (ROOT / f"{m['path']}{m['page']}.md").resolve(),
            (path.parent / f"{m['path']}{m['page']}.md").resolve(),
        }
        if target not in names:
            bad.append(f"{path.relative_to(ROOT)}: {m[0]!r} is not docs/reference/{m['page']}.md")
        elif m["section"] and m["section"] not in _headings(target):
            bad.append(f"{path.relative_to(ROOT)}: {m[0]!r} cites no section of {target.name}")
    return bad


def test_every_cited_reference_page_and_section_is_in_the_repository() -> None:
    bad = [line for path in _files() for line in _misdirected(path, path.read_text(errors="replace"))]
    assert not bad, "\n".join(bad)


def test_no_citation_points_outside_the_repository() -> None:
    outside = [str(p.relative_to(ROOT)) for p in _files() if "shared/reference" in p.read_text(errors="replace")]
    assert not outside


def test_every_source_tag_the_planner_cites_is_listed_in_a_reference_page() -> None:
    listed = {tag for page in REFERENCE.glob("*.md") for tag in TAG.findall(page.read_text())}
    planner = ROOT / "src" / "tokenmill" / "planner"
    cited = [*planner.glob("configs/*.json"), planner / "gpus.yaml", ROOT / "docs" / "planner.md"]
    missing = {f"{p.name}: [{tag}]" for p in cited for tag in TAG.findall(p.read_text()) if tag not in listed}
    assert not missing


def test_the_scan_finds_a_page_outside_the_repository_and_a_section_that_is_not_there() -> None:
    code = ROOT / "src" / "tokenmill" / "planner" / "roofline.py"
    assert len(_misdirected(code, "a roofline (hardware.md §4.1)")) == 1
    assert len(_misdirected(code, "a roofline (docs/reference/hardware.md §9.9)")) == 1
    assert _misdirected(code, "a roofline (docs/reference/hardware.md §4.1)") == []
    assert _misdirected(ROOT / "docs" / "planner.md", "see reference/sglang.md §2.3") == []
