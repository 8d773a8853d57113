"""A Hugging Face ``config.json`` read into a :class:`~tokenmill.planner.models.ModelSpec`.

The text config is read first (``text_config``, ``llm_config``), then the top level. The layer mix comes from, in
order: ``hybrid_override_pattern`` (Nemotron-H), ``model_type`` ``falcon_h1``, ``layer_types`` /
``layers_block_type``, ``full_attention_interval`` (Qwen3-Next); without any of them every layer is attention.
A config that lacks what the planner needs raises a :class:`~tokenmill.errors.ConfigError` listing every missing
field (docs/planner.md, Models).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenmill.errors import ConfigError
from tokenmill.planner.models import (
    Attention,
    Mlp,
    ModelSpec,
    Moe,
    Recurrent,
    StateDtype,
    VisionSizing,
    WeightDtype,
)

# model types whose attention has an output gate (q_proj emits 2x: query and gate)
_GATED_ATTENTION_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})
# model types whose MLP / experts are not gated (two matrices, relu2)
_UNGATED_MLP_TYPES = frozenset({"nemotron_h"})


class _Reader:
    """Looks keys up in the text config first, then the top level; records what is missing."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        text = cfg.get("text_config") or cfg.get("llm_config")
        self.nested = isinstance(text, Mapping)
        self.text: Mapping[str, Any] = text if isinstance(text, Mapping) else cfg
        self.top = cfg
        self.missing: list[str] = []

    def get(self, *keys: str) -> Any:
        for key in keys:
            for scope in (self.text, self.top):
                value = scope.get(key)
                if value is not None:
                    return value
        return None

    def int(self, *keys: str, default: int | None = None) -> int:
        value = self.get(*keys)
        if value is None:
            if default is None:
                self.missing.append(" or ".join(keys))
                return 0
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            self.missing.append(f"{keys[0]} (not an integer: {value!r})")
            return 0


def _layer_kinds(r: _Reader, model_type: str, n_layers: int) -> list[set[str]]:
    """Per layer, the blocks it holds: a subset of {"attention", "recurrent", "mlp", "moe"}."""
    pattern = r.get("hybrid_override_pattern")
    if isinstance(pattern, str):  # Nemotron-H: one block per layer
        table = {"M": "recurrent", "*": "attention", "-": "mlp", "E": "moe"}
        if len(pattern) != n_layers or any(ch not in table for ch in pattern):
            raise ConfigError(
                f"hybrid_override_pattern {pattern!r} must have num_hidden_layers={n_layers} characters from M*-E"
            )
        return [{table[ch]} for ch in pattern]
    ffn = _ffn_kinds(r, n_layers)
    if model_type == "falcon_h1":  # attention and SSM side by side in every block
        return [{"attention", "recurrent", f} for f in ffn]
    layer_types = r.get("layer_types", "layers_block_type")
    if isinstance(layer_types, list) and len(layer_types) == n_layers:
        names = [str(kind).lower() for kind in layer_types]
        # Nemotron-style lists hold one block per layer; Qwen-style ones name the mixer of a mixer+FFN layer
        one_block = any(k in ("mamba", "mamba2", "moe", "mlp") for k in names)
        out: list[set[str]] = []
        for k, f in zip(names, ffn, strict=True):
            if k in ("moe", "mlp"):
                out.append({k})
            elif "linear" in k or "mamba" in k:
                out.append({"recurrent"} if one_block else {"recurrent", f})
            elif "attention" in k:
                out.append({"attention"} if one_block else {"attention", f})
            else:
                raise ConfigError(f"layer_types has an unknown entry {k!r}; the planner knows attention/linear/mamba")
        return out
    interval = r.get("full_attention_interval")
    if interval:
        n = int(interval)
        return [{"attention" if (i + 1) % n == 0 else "recurrent", f} for i, f in enumerate(ffn)]
    return [{"attention", f} for f in ffn]


def _ffn_kinds(r: _Reader, n_layers: int) -> list[str]:
    experts = r.int("num_experts", "num_local_experts", "n_routed_experts", default=0)
    if experts <= 0:
        return ["mlp"] * n_layers
    mlp_only = set(r.get("mlp_only_layers") or [])
    step = r.int("decoder_sparse_step", default=1) or 1
    return ["mlp" if i in mlp_only or (i + 1) % step else "moe" for i in range(n_layers)]


def _vision_params(vcfg: Mapping[str, Any], text_hidden: int) -> int:
    """Approximate ViT size: blocks (qkv, proj, fc1, fc2) + patch embedding + 2x2 merger + position table."""
    depth = int(vcfg.get("depth") or vcfg.get("num_hidden_layers") or 0)
    vh = int(vcfg.get("hidden_size") or vcfg.get("embed_dim") or 0)
    vint = int(vcfg.get("intermediate_size") or 4 * vh)
    if not depth or not vh:
        return 0
    out = int(vcfg.get("out_hidden_size") or text_hidden)
    merge = int(vcfg.get("spatial_merge_size") or 2)
    patch = int(vcfg.get("patch_size") or 16)
    temporal = int(vcfg.get("temporal_patch_size") or 2)
    channels = int(vcfg.get("in_channels") or 3)
    positions = int(vcfg.get("num_position_embeddings") or 0)
    blocks = depth * (4 * vh * vh + 2 * vh * vint)
    merged = vh * merge * merge
    return blocks + channels * temporal * patch * patch * vh + merged * merged + merged * out + positions * vh


def _vision_sizing(vcfg: Mapping[str, Any]) -> VisionSizing:
    """What SGLang's multimodal memory factor reads from a vision config (keys taken literally)."""
    layers = vcfg.get("num_hidden_layers")
    hidden = vcfg.get("hidden_size")
    return VisionSizing(
        num_hidden_layers=int(layers) if layers is not None else None,
        hidden_size=int(hidden) if hidden is not None else None,
    )


def _dtype_name(value: Any, default: StateDtype) -> StateDtype:
    names: dict[str, StateDtype] = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    return names.get(str(value), default) if value is not None else default


def _checkpoint_dtype(cfg: Mapping[str, Any]) -> WeightDtype:
    quant = cfg.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", "")).lower()
        algo = str(quant.get("quant_algo", "")).lower()
        if "fp4" in method or "fp4" in algo:
            return "fp4"
        if "fp8" in method or "fp8" in algo:
            return "fp8"
    return "bf16"


def from_hf_config(cfg: Mapping[str, Any], name: str, **meta: Any) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json mapping; ConfigError lists every missing field."""
    r = _Reader(cfg)
    model_type = str(r.get("model_type") or "unknown")
    hidden = r.int("hidden_size", "d_model")
    n_layers = r.int("num_hidden_layers", "n_layer", "num_layers")
    vocab = r.int("vocab_size")
    heads = r.int("num_attention_heads", "n_head")
    if r.missing:
        raise _missing(name, model_type, r.missing)
    kv_heads = r.int("num_key_value_heads", default=heads)
    head_dim = r.int("head_dim", "attention_head_dim", default=hidden // heads if heads else 0)
    kinds = _layer_kinds(r, model_type, n_layers)
    count = {k: sum(k in layer for layer in kinds) for k in ("attention", "recurrent", "mlp", "moe")}
    gated_mlp = model_type not in _UNGATED_MLP_TYPES
    attention = Attention(
        layers=count["attention"],
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=r.int("v_head_dim", default=head_dim),
        output_gate=bool(r.get("attn_output_gate") or model_type in _GATED_ATTENTION_TYPES),
    )
    recurrent = _recurrent(r, model_type, count["recurrent"]) if count["recurrent"] else None
    mlp = _mlp(r, count["mlp"], gated_mlp)
    moe = _moe(r, count["moe"], gated_mlp)
    if r.missing:
        raise _missing(name, model_type, r.missing)
    vision_cfg = cfg.get("vision_config")
    architectures = cfg.get("architectures")
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden=hidden,
        vocab=vocab,
        n_layers=n_layers,
        tied_embeddings=bool(r.get("tie_word_embeddings") or False),
        attention=attention,
        recurrent=recurrent,
        mlp=mlp,
        moe=moe,
        vision_params=_vision_params(vision_cfg, hidden) if isinstance(vision_cfg, Mapping) else 0,
        mtp_layers=r.int("mtp_num_hidden_layers", "num_nextn_predict_layers", default=0),
        context_length=r.int("max_position_embeddings", default=32768),
        ssm_dtype=_dtype_name(r.get("mamba_ssm_dtype"), "fp32"),
        ssm_dtype_from_config=r.get("mamba_ssm_dtype") is not None,
        weight_dtype=_checkpoint_dtype(cfg),
        architectures=tuple(str(a) for a in architectures) if isinstance(architectures, list) else (),
        text_subconfig=r.nested,
        vision=_vision_sizing(vision_cfg) if isinstance(vision_cfg, Mapping) else None,
        **meta,
    )


def _mlp(r: _Reader, layers: int, gated: bool) -> Mlp | None:
    """The dense MLP of ``layers`` layers (None when no layer has one)."""
    if not layers:
        return None
    return Mlp(layers=layers, intermediate=r.int("intermediate_size", "ffn_hidden_size"), gated=gated)


def _moe(r: _Reader, layers: int, gated: bool) -> Moe | None:
    """The mixture of experts of ``layers`` layers (None when no layer has one)."""
    if not layers:
        return None
    return Moe(
        layers=layers,
        experts=r.int("num_experts", "num_local_experts", "n_routed_experts"),
        top_k=r.int("num_experts_per_tok", "moe_topk"),
        expert_intermediate=r.int("moe_intermediate_size"),
        shared_intermediate=r.int("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", default=0),
        gated=gated,
    )


def _recurrent(r: _Reader, model_type: str, layers: int) -> Recurrent:
    if r.get("linear_num_value_heads") is not None:  # Qwen3-Next / Qwen3.5 Gated DeltaNet
        return Recurrent(
            kind="gdn",
            layers=layers,
            heads=r.int("linear_num_value_heads"),
            head_dim=r.int("linear_value_head_dim"),
            state_size=r.int("linear_key_head_dim"),
            n_groups=r.int("linear_num_key_heads"),
            conv_kernel=r.int("linear_conv_kernel_dim", default=4),
        )
    if model_type == "falcon_h1" or r.get("mamba_d_ssm") is not None:
        heads = r.int("mamba_n_heads")
        d_ssm = r.int("mamba_d_ssm", default=r.int("mamba_expand", default=2) * r.int("hidden_size"))
        return Recurrent(
            kind="mamba2",
            layers=layers,
            heads=heads,
            head_dim=r.int("mamba_d_head", default=d_ssm // heads if heads else 0),
            state_size=r.int("mamba_d_state"),
            n_groups=r.int("mamba_n_groups", default=1),
            conv_kernel=r.int("mamba_d_conv", default=4),
        )
    if r.get("mamba_num_heads") is not None:  # Nemotron-H
        return Recurrent(
            kind="mamba2",
            layers=layers,
            heads=r.int("mamba_num_heads"),
            head_dim=r.int("mamba_head_dim"),
            state_size=r.int("ssm_state_size", "mamba_d_state", "ssm_states_size"),
            n_groups=r.int("n_groups", "mamba_num_groups", "mamba_n_groups"),
            conv_kernel=r.int("conv_kernel", "mamba_d_conv", default=4),
        )
    r.missing.append(
        "recurrent-layer geometry (GDN: linear_num_value_heads, linear_value_head_dim, linear_key_head_dim, "
        "linear_num_key_heads; Mamba2: mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups)"
    )
    return Recurrent(kind="mamba2", layers=layers, heads=0, head_dim=0, state_size=0, n_groups=1, conv_kernel=4)


def _missing(name: str, model_type: str, missing: list[str]) -> ConfigError:
    fields = "\n  ".join(missing)
    return ConfigError(
        f"the config of {name!r} (model_type {model_type!r}) lacks what the planner needs:\n  {fields}\n"
        "add these fields to the config.json, or pick a bundled model (tokenmill plan --list-models)"
    )
