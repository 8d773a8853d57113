"""Regenerate the module list of ARCHITECTURE.md from each module's docstring (``--check``: fail if stale).

Every module under src/tokenmill gets one line: its path and the first line of its docstring.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "ARCHITECTURE.md"
PKG = ROOT / "src" / "tokenmill"
START, END = "<!-- modules:start -->", "<!-- modules:end -->"


def module_lines() -> list[str]:
    lines = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else "(entry point)"
        lines.append(f"- `{rel}` — {first}")
    return lines


def render(text: str) -> str:
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n" + "\n".join(module_lines()) + f"\n{END}{tail}"


def main() -> int:
    text = DOC.read_text()
    new = render(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print("ARCHITECTURE.md is stale: run `python scripts/gen_architecture.py`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
