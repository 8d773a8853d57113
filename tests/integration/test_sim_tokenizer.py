"""With ``--model-spec`` naming a model directory that holds a ``tokenizer.json``, the simulated server counts a
text prompt's tokens with that tokenizer, as the real server does; without one it estimates them."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tokenmill.config import SimSpec
from tokenmill.sim.server import SimServer
from tokenmill.sim.text import estimate_tokens

tokenizers = pytest.importorskip("tokenizers")

TEXT = "the quick brown fox jumps over the lazy dog again and again"


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer (one token per word) and a config.json beside it, as in a model directory."""
    words = sorted(set(TEXT.split()))
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text("{}")
    return folder / "config.json"


async def prompt_tokens(cfg: SimSpec) -> int:
    body = {"text": TEXT, "sampling_params": {"max_new_tokens": 2}}
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s, s.post(srv.url + "/generate", json=body) as r:
        assert r.status == 200
        return int((await r.json())["meta_info"]["prompt_tokens"])


async def test_a_tokenizer_beside_the_model_spec_counts_the_prompt(tmp_path: Path) -> None:
    spec = write_tokenizer(tmp_path)
    words = len(TEXT.split())
    assert estimate_tokens(TEXT) != words  # the estimate alone would say otherwise
    assert await prompt_tokens(SimSpec(model_spec=str(spec), instant=True)) == words
    assert await prompt_tokens(SimSpec(model_spec=str(tmp_path), instant=True)) == words  # the directory itself


async def test_without_a_tokenizer_the_prompt_is_estimated(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    cfg = SimSpec(model_spec=str(tmp_path / "config.json"), instant=True)
    assert await prompt_tokens(cfg) == estimate_tokens(TEXT)
