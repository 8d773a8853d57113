"""Model geometry: every bundled config against the derived numbers of docs/reference/hardware.md §2-§3."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tokenmill.errors import ConfigError
from tokenmill.planner.catalog import bundled_models, load_model
from tokenmill.planner.hfconfig import from_hf_config
from tokenmill.planner.models import (
    decode_flops_per_token,
    kv_bytes_per_token,
    param_counts,
    state_bytes_per_slot,
    weight_bytes,
)

GIB = 1 << 30

# docs/reference/hardware.md §3.3 "Derived per-model table (TP=1)": KV B/token bf16, state B/slot fp32 SSM, bf16 SSM
REFERENCE_TABLE = {
    "qwen3.6-27b": (65_536, 153_944_064, 78_446_592),
    "qwen3-next-80b-a3b": (24_576, 77_266_944, 39_518_208),
    "qwen3.6-35b-a3b": (20_480, 64_389_120, 32_931_840),
    "qwen3.5-397b-a17b": (30_720, 192_061_440, 97_689_600),
    "nemotron-h-8b": (16_384, 102_137_856, 51_806_208),
    "falcon-h1-1.5b": (24_576, 76_013_568, 38_264_832),
    "qwen3-32b": (262_144, 0, 0),
    "llama-3.1-8b": (131_072, 0, 0),
    "llama-3.1-70b": (327_680, 0, 0),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_TABLE))
def test_kv_and_state_bytes_match_the_reference_table(name: str) -> None:
    spec = load_model(name)
    kv, slot_fp32, slot_bf16 = REFERENCE_TABLE[name]
    assert kv_bytes_per_token(spec, "bf16") == kv
    assert state_bytes_per_slot(spec, "fp32") == slot_fp32
    assert state_bytes_per_slot(spec, "bf16") == slot_bf16


def test_qwen27b_state_slot_by_the_formula_of_section_5() -> None:
    # docs/reference/hardware.md §5: slot_fp32 = 48*(48*128*128*4 + (48*128+2*16*128)*3*2)
    spec = load_model("Qwen3.6-27B")
    assert state_bytes_per_slot(spec) == 48 * (48 * 128 * 128 * 4 + (48 * 128 + 2 * 16 * 128) * 3 * 2)
    assert kv_bytes_per_token(spec, "fp8") == 2 * 4 * 256 * 1 * 16  # 32 KiB with an fp8 KV cache


def test_tp_shards_state_and_replicates_kv_heads() -> None:
    # docs/reference/sglang.md §2.2 worked example: Qwen3.5-35B-A3B at TP=4 -> 15.35 MiB a slot, 10,240 B/token
    spec = load_model("qwen3.5-35b-a3b")
    assert state_bytes_per_slot(spec, "fp32", tp=4) == 16_097_280
    assert round(state_bytes_per_slot(spec, "fp32", tp=4) / (1 << 20), 2) == 15.35
    assert kv_bytes_per_token(spec, "bf16", tp=4) == 10_240  # 2 KV heads over 4 GPUs: one head each


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    with pytest.raises(ConfigError, match="TP size 5"):
        state_bytes_per_slot(load_model("qwen3.6-27b"), tp=5)


def test_qwen27b_parameter_breakdown_of_section_2_1() -> None:
    spec = load_model("qwen3.6-27b")
    p = param_counts(spec)
    assert p.embedding == p.lm_head == 1_271_398_400
    assert p.attention == 16 * 104_857_600  # q+gate 5120->12288, k and v 5120->1024, o 6144->5120
    assert p.recurrent == 48 * 115_875_840
    assert p.mlp == 64 * 267_386_880
    assert p.text == 26_895_319_040  # "Total text 26.896 B"
    assert p.total / 1e9 == pytest.approx(27.78, abs=0.01)  # + vision 0.46 + MTP 0.42 = 27.78 B on disk


def test_qwen27b_weight_bytes_resident_and_read_per_step() -> None:
    spec = load_model("qwen3.6-27b")
    bf16, fp8 = weight_bytes(spec, "bf16"), weight_bytes(spec, "fp8")
    assert bf16.resident / GIB == pytest.approx(50.95, abs=0.01)  # "Resident weights: 50.95 GiB (bf16)"
    assert fp8.resident / GIB == pytest.approx(28.3, abs=0.05)  # "≈28.3 GiB (FP8)"
    assert bf16.read_dense / 1e9 == pytest.approx(51.25, abs=0.01)  # "51.25 GB (bf16)"
    assert fp8.read_dense / 1e9 == pytest.approx(26.9, abs=0.01)  # "26.9 GB for FP8 linears"
    assert bf16.read_experts == 0


def test_moe_counts_active_experts_only() -> None:
    p = param_counts(load_model("qwen3-next-80b-a3b"))
    assert p.total / 1e9 == pytest.approx(81.3, abs=0.5)  # "80 B / 3 B active" (+ MTP)
    assert 3.0 < p.compute / 1e9 < 4.0
    assert p.experts_active * 512 == p.experts * 10  # top-10 of 512


def test_decode_flops_grow_with_context_by_the_attention_term() -> None:
    spec = load_model("qwen3.6-27b")
    base = decode_flops_per_token(spec, 0)
    # docs/reference/hardware.md §4.1: full attention at 3K context ≈ 4·24·256·3000·16 ≈ 1.2 GFLOP; GDN ≈ 0.19 GFLOP
    assert decode_flops_per_token(spec, 3000) - base == pytest.approx(4 * 24 * 256 * 3000 * 16)
    assert base - 2 * param_counts(spec).compute == pytest.approx(48 * 48 * 128 * 128 * 5)


def test_layer_mixes_from_every_config_spelling() -> None:
    nemotron = load_model("nemotron-h-8b")
    assert (nemotron.attention.layers, nemotron.recurrent and nemotron.recurrent.layers) == (4, 24)
    assert nemotron.mlp is not None and not nemotron.mlp.gated
    falcon = load_model("falcon-h1")
    assert (falcon.attention.layers, falcon.recurrent and falcon.recurrent.layers) == (24, 24)
    qwen_next = load_model("qwen3-next")  # full_attention_interval, no layer_types
    assert (qwen_next.attention.layers, qwen_next.recurrent and qwen_next.recurrent.layers) == (12, 36)
    llama = load_model("llama-3.1-8b")
    assert not llama.is_hybrid and llama.attention.layers == 32


def test_nemotron_style_layer_types_list_is_one_block_per_layer() -> None:
    cfg = {
        "model_type": "nemotron_h",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "vocab_size": 100,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "layers_block_type": ["mamba", "mlp", "attention", "mamba"],
        "mamba_num_heads": 8,
        "mamba_head_dim": 8,
        "ssm_state_size": 16,
        "n_groups": 2,
    }
    spec = from_hf_config(cfg, "tiny")
    assert spec.attention.layers == 1
    assert spec.recurrent is not None and spec.recurrent.layers == 2
    assert spec.mlp is not None and spec.mlp.layers == 1


def test_unknown_architecture_lists_what_is_missing() -> None:
    with pytest.raises(ConfigError) as err:
        from_hf_config({"model_type": "mystery", "hidden_size": 1024}, "mystery-1b")
    message = str(err.value)
    for field in ("num_hidden_layers", "vocab_size", "num_attention_heads"):
        assert field in message
    assert "mystery-1b" in message and "--list-models" in message


def test_recurrent_layers_without_geometry_are_reported() -> None:
    cfg = {
        "model_type": "new_hybrid",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "vocab_size": 100,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "full_attention_interval": 2,
    }
    with pytest.raises(ConfigError, match="recurrent-layer geometry"):
        from_hf_config(cfg, "new")


def test_bad_hybrid_pattern_is_refused() -> None:
    cfg = {
        "model_type": "nemotron_h",
        "hidden_size": 64,
        "num_hidden_layers": 3,
        "vocab_size": 100,
        "num_attention_heads": 4,
        "hybrid_override_pattern": "M*",
    }
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        from_hf_config(cfg, "bad")


def test_checkpoint_quantization_and_ssm_dtype_are_read(tmp_path: Path) -> None:
    cfg = json.loads(resources.files("tokenmill.planner").joinpath("configs/qwen3.6-27b.json").read_text())
    cfg.pop("_tokenmill")
    cfg["quantization_config"] = {"quant_method": "fp8"}
    cfg["text_config"]["mamba_ssm_dtype"] = "bfloat16"
    folder = tmp_path / "Qwen3.6-27B-FP8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    spec = load_model(str(folder))
    assert spec.name == "Qwen3.6-27B-FP8"
    assert spec.weight_dtype == "fp8" and spec.ssm_dtype == "bf16"
    assert weight_bytes(spec).resident == weight_bytes(load_model("qwen3.6-27b"), "fp8").resident


def test_catalog_names_are_case_and_punctuation_insensitive() -> None:
    assert load_model("QWEN3.6-27B").name == load_model("qwen3_5_27b").name == "Qwen3.6-27B"
    assert len(bundled_models()) >= 9


def test_unknown_model_name_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match=r"config\.json"):
        load_model("no-such-model-7b")


def test_unreadable_config_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model(str(bad))


def test_architecture_and_vision_fields_for_sglangs_multimodal_rules() -> None:
    qwen = load_model("qwen3.6-27b")
    assert qwen.architectures == ("Qwen3_5ForConditionalGeneration",)
    assert qwen.is_multimodal and qwen.keeps_prefill_graph and qwen.supports_extra_buffer
    # the Qwen vision config names its depth `depth`: SGLang's factor sees no num_hidden_layers
    assert qwen.vision is not None and (qwen.vision.num_hidden_layers, qwen.vision.hidden_size) == (None, 1152)
    for name in ("qwen3-next-80b-a3b", "llama-3.1-8b", "nemotron-h-8b"):
        assert not load_model(name).is_multimodal, name
    assert not load_model("llama-3.1-8b").supports_extra_buffer
    assert load_model("nemotron-h-8b").supports_extra_buffer


def test_a_nested_text_config_is_multimodal_and_vision_keys_are_read_literally() -> None:
    cfg: dict[str, Any] = {
        "architectures": ["SomeVLForConditionalGeneration"],
        "text_config": {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "vocab_size": 100,
            "num_attention_heads": 4,
            "intermediate_size": 128,
        },
        "vision_config": {"num_hidden_layers": 32, "hidden_size": 1280, "depth": 7},
    }
    spec = from_hf_config(cfg, "vl")
    assert spec.is_multimodal and not spec.keeps_prefill_graph  # not on SGLang's prefill-graph allow list
    assert spec.vision is not None and (spec.vision.num_hidden_layers, spec.vision.hidden_size) == (32, 1280)
    flat = from_hf_config({**cfg["text_config"], "architectures": ["LlamaForCausalLM"]}, "text")
    assert not flat.is_multimodal and flat.vision is None and flat.keeps_prefill_graph
