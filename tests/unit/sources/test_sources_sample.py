"""The bundled sample dataset: up to date with its generator, and every row a valid prompt."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

from tokenmill.config import InputSpec
from tokenmill.records import Prompt
from tokenmill.sources import count_rows, iter_prompts, sample_dataset_path

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "make_sample_data.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample_data", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_sample_matches_the_generator() -> None:
    script = _script()
    path = sample_dataset_path()
    assert path.read_bytes() == script.render(script.build_rows()), "run: python scripts/make_sample_data.py"
    assert path.stat().st_size < 1_500_000


def test_every_sample_row_maps_to_a_prompt_with_its_own_id() -> None:
    spec = InputSpec(path=str(sample_dataset_path()), id_field="id", conversation_turns="history")
    items = list(iter_prompts(spec))
    assert len(items) == 3000 == count_rows(spec)
    prompts = [i for i in items if isinstance(i, Prompt)]
    assert len(prompts) == 3000
    assert prompts[0].id == "sample-00000" and prompts[-1].id == "sample-02999"
    assert all(p.messages and p.messages[-1]["role"] == "user" for p in prompts)
    shapes = Counter(
        (p.messages[0]["role"] == "system", sum(m["role"] == "user" for m in p.messages)) for p in prompts if p.messages
    )
    assert shapes[(True, 1)] and shapes[(False, 1)] and shapes[(False, 2)], shapes  # varied conversations
    lengths = sorted(len(p.messages[-1]["content"]) for p in prompts if p.messages)
    assert lengths[0] < 50 and lengths[-1] > 500
