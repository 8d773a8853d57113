"""The doctor's rule table and what it drives: every rule has a check, every setting a rule's condition names is a
setting the job has, and the docs' table shows every rule."""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pydantic import BaseModel

from tokenmill.config import DoctorSpec, JobSpec
from tokenmill.doctor.rules import RULE_IDS, RULES

ROOT = Path(__file__).resolve().parents[3]
SETTING = re.compile(r"(?<![\w`])([a-z][a-z0-9]*(?:[_.][a-z0-9]+)+)(?![\w`])")


def _paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, field in model.model_fields.items():
        out.add(prefix + name)
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out |= _paths(arg, f"{prefix}{name}.")
    return out


def test_every_rule_has_one_id_and_one_check() -> None:
    assert len(set(RULE_IDS)) == len(RULES)
    assert all((r.check is None) != (r.check_client is None) for r in RULES)


def test_every_setting_a_rule_names_is_a_setting_of_the_job() -> None:
    job = _paths(JobSpec)
    for rule in RULES:
        for word in SETTING.findall(rule.when):
            known = word in DoctorSpec.model_fields or any(p == word or p.endswith("." + word) for p in job)
            assert known, f"{rule.id} names {word!r}, which is no setting"


def test_the_docs_table_shows_every_rule() -> (
    None
):  # rendered by scripts/gen_tables.py (tests/unit/test_architecture.py)
    page = (ROOT / "docs" / "observability.md").read_text()
    assert all(f"\n| {r.id} | " in page for r in RULES)
