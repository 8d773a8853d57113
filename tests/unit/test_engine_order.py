"""The suite's own ordering: tests of a real engine run last, grouped by kind, however they name the kind.

A real engine starts in ~30 s on two cores and the pool keeps one up at a time, so a kind whose tests are not
grouped starts more than once per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import pytest_collection_modifyitems
from tests.engines.pool import KINDS


@dataclass
class CallSpec:
    params: dict[str, Any]


@dataclass
class Item:
    """What the ordering hook reads of a collected test."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    fixturenames: tuple[str, ...] = ()
    markers: list[pytest.MarkDecorator] = field(default_factory=list)

    @property
    def callspec(self) -> CallSpec | None:
        return CallSpec(self.params) if self.params else None

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [m.mark for m in self.markers if m.name == name]

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next(iter(self.iter_markers(name)), None)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker)


def test_a_kind_named_by_a_fixture_parameter_of_any_name_is_grouped_with_its_other_tests() -> None:
    real = [name for name, kind in KINDS.items() if kind.real and kind.engine == "sglang"][:2]
    a, b = real
    items: list[Any] = [
        Item("unit"),
        Item("load-a", params={"kv_server": a}),  # a module's own parametrized fixture
        Item("load-b", params={"server": b}),
        Item("plain"),
        Item("doctor-a", markers=[pytest.mark.server_kind(a)]),
        Item("openai-a", params={"server": a, "route": "/v1/completions"}),
    ]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["unit", "plain", "load-a", "doctor-a", "openai-a", "load-b"]
    assert all(i.get_closest_marker("sglang") for i in items[2:]) and not items[0].get_closest_marker("sglang")
    assert all(i.get_closest_marker("timeout") for i in items[2:])  # the first test of a kind starts it
