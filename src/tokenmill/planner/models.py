"""Model geometry from a Hugging Face ``config.json``, and what follows from it.

:func:`from_hf_config` turns a config mapping into a :class:`ModelSpec` (layer counts by kind, head
geometry, FFN/MoE shape); the functions below derive parameters, weight bytes, KV bytes per token,
recurrent-state bytes per request slot and FLOPs per decode token. All of it is pure; reading the
bundled configs from disk lives in :mod:`tokenmill.planner.catalog`.

Formulas (docs/planner.md; reference docs/reference/hardware.md §2-§3, docs/reference/sglang.md §2.2):

* KV bytes/token = ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * n_attention_layers * bytes(kv)``;
  only full-attention layers hold KV (SGLang's hybrid pool covers ``full_attention_layer_ids`` only).
* State bytes/slot (SGLang ``Mamba2StateShape``) = ``n_linear_layers * (conv_dim/tp * (K-1) * bytes(conv)
  + heads/tp * head_dim * state_size * bytes(ssm))`` with ``conv_dim = heads*head_dim + 2*n_groups*state``.
  A GDN layer maps to it as heads = value heads, head_dim = value head dim, state = key head dim,
  n_groups = key heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tokenmill.errors import ConfigError

WeightDtype = Literal["bf16", "fp8", "fp4"]
StateDtype = Literal["fp32", "bf16", "fp16"]
KvDtype = Literal["bf16", "fp8"]

WEIGHT_DTYPES: tuple[WeightDtype, ...] = ("bf16", "fp8", "fp4")

#: Bytes per parameter of quantized decoder linears. fp8: block scales are negligible; fp4 is NVFP4,
#: 4 bits plus one fp8 scale per 16 values = 4.5 bits. Embeddings, lm_head and vision stay bf16.
WEIGHT_BYTES: dict[WeightDtype, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}
STATE_BYTES: dict[StateDtype, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
KV_BYTES: dict[KvDtype, int] = {"bf16": 2, "fp8": 1}

#: FLOPs per recurrent-state element per decoded token (decay, read-out, update; docs/reference/hardware.md §4.1 "~5").
RECURRENT_FLOPS_PER_STATE_ELEMENT = 5

# model types whose attention has an output gate (q_proj emits 2x: query and gate)
_GATED_ATTENTION_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})
# model types whose MLP / experts are not gated (two matrices, relu2)
_UNGATED_MLP_TYPES = frozenset({"nemotron_h"})
# model types SGLang serves with Mamba radix-cache `extra_buffer` support (docs/reference/sglang.md §1.1); used when a
# config names no architecture
_EXTRA_BUFFER_TYPES = frozenset(
    {"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h", "falcon_h1"}
)
# architectures SGLang 0.5.23 lets use `extra_buffer` (arg_groups/overrides.py: _MAMBA_EXTRA_BUFFER_ARCHS,
# the subset the bundled and related hybrids use)
_EXTRA_BUFFER_ARCHS = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "KimiLinearForCausalLM",
        "BailingMoeV2_5ForCausalLM",
    }
)
# architectures SGLang treats as multimodal (configs/model_config.py: multimodal_model_archs, the Qwen VL
# line and a few common ones); a config with a separate text sub-config counts as multimodal too
_MULTIMODAL_ARCHS = frozenset(
    {
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "LlavaForConditionalGeneration",
        "Mistral3ForConditionalGeneration",
        "InternVLChatModel",
        "KimiVLForConditionalGeneration",
    }
)
# multimodal architectures whose language-model prefill keeps the breakable prefill CUDA graph in 0.5.23
# (configs/model_config.py: multimodal_breakable_cuda_graph_supported_model_archs); other multimodal
# architectures run prefill without it
_MULTIMODAL_PREFILL_GRAPH_ARCHS = frozenset(
    {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "KimiK25ForConditionalGeneration"}
)


@dataclass(frozen=True, slots=True)
class Attention:
    """Full (softmax) attention layers: the only layers that hold KV cache."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    output_gate: bool = False

    def params_per_layer(self, hidden: int) -> int:
        q_out = self.heads * self.head_dim * (2 if self.output_gate else 1)
        kv_out = self.kv_heads * (self.head_dim + self.v_head_dim)
        return hidden * q_out + hidden * kv_out + self.heads * self.v_head_dim * hidden


@dataclass(frozen=True, slots=True)
class Recurrent:
    """Linear-attention (GDN) or Mamba2 layers: a fixed-size state per request, no KV."""

    kind: Literal["gdn", "mamba2"]
    layers: int
    heads: int  # GDN: value heads; Mamba2: SSM heads
    head_dim: int  # GDN: value head dim; Mamba2: SSM head dim
    state_size: int  # GDN: key head dim; Mamba2: d_state
    n_groups: int  # GDN: key heads; Mamba2: n_groups
    conv_kernel: int

    @property
    def intermediate(self) -> int:
        return self.heads * self.head_dim

    def conv_dim(self, tp: int = 1) -> int:
        """SGLang's conv width, with n_groups padded when TP does not divide it (``extra_groups_for_head_shards``)."""
        groups = self.n_groups if self.n_groups % tp == 0 else self.n_groups + (tp - self.n_groups)
        return self.intermediate + 2 * groups * self.state_size

    def state_elements(self) -> int:
        """SSM state elements per layer per request (TP=1)."""
        return self.heads * self.head_dim * self.state_size

    def params_per_layer(self, hidden: int) -> int:
        conv = self.conv_dim() * self.conv_kernel
        if self.kind == "gdn":
            # in_proj q,k,v,z + a,b gates; conv; out_proj
            in_out = 2 * self.n_groups * self.state_size + 2 * self.intermediate + 2 * self.heads
        else:
            # in_proj z, x, B, C, dt; conv; out_proj
            in_out = 2 * self.intermediate + 2 * self.n_groups * self.state_size + self.heads
        return hidden * in_out + conv + self.intermediate * hidden


@dataclass(frozen=True, slots=True)
class Mlp:
    """Dense feed-forward layers."""

    layers: int
    intermediate: int
    gated: bool = True

    def params_per_layer(self, hidden: int) -> int:
        return (3 if self.gated else 2) * hidden * self.intermediate


@dataclass(frozen=True, slots=True)
class Moe:
    """Mixture-of-experts feed-forward layers (routed experts plus an optional shared expert)."""

    layers: int
    experts: int
    top_k: int
    expert_intermediate: int
    shared_intermediate: int = 0
    gated: bool = True

    def expert_params(self, hidden: int) -> int:
        return (3 if self.gated else 2) * hidden * self.expert_intermediate

    def shared_params(self, hidden: int) -> int:
        return (3 if self.gated else 2) * hidden * self.shared_intermediate


@dataclass(frozen=True, slots=True)
class VisionSizing:
    """The two vision-config fields SGLang's multimodal memory factor reads (``adjust_mem_fraction_for_vlm``).

    ``num_hidden_layers`` is the config's own key, ``None`` when absent: Qwen vision towers name their depth
    ``depth``, and SGLang then falls back to 24 layers.
    """

    num_hidden_layers: int | None
    hidden_size: int | None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The geometry of one model, enough to size SGLang's pools and the decode roofline."""

    name: str
    model_type: str
    hidden: int
    vocab: int
    n_layers: int
    tied_embeddings: bool
    attention: Attention
    recurrent: Recurrent | None = None
    mlp: Mlp | None = None
    moe: Moe | None = None
    vision_params: int = 0
    mtp_layers: int = 0
    context_length: int = 32768
    ssm_dtype: StateDtype = "fp32"
    weight_dtype: WeightDtype = "bf16"
    architectures: tuple[str, ...] = ()
    text_subconfig: bool = False  # the config nests a text_config/llm_config (SGLang: multimodal)
    vision: VisionSizing | None = None  # None: the config has no vision_config
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    assumed: tuple[str, ...] = field(default=())

    @property
    def is_hybrid(self) -> bool:
        """True when SGLang keeps a per-request recurrent state pool (Mamba/GDN layers)."""
        return self.recurrent is not None and self.recurrent.layers > 0

    @property
    def supports_extra_buffer(self) -> bool:
        """Whether SGLang offers ``extra_buffer`` for this model (by architecture, else by model type)."""
        if self.architectures:
            return self.architectures[0] in _EXTRA_BUFFER_ARCHS
        return self.model_type in _EXTRA_BUFFER_TYPES

    @property
    def is_multimodal(self) -> bool:
        """SGLang's ``ModelConfig.is_multimodal``: a multimodal architecture or a nested text config."""
        return self.text_subconfig or any(a in _MULTIMODAL_ARCHS for a in self.architectures)

    @property
    def keeps_prefill_graph(self) -> bool:
        """Whether SGLang 0.5.23 captures prefill CUDA graphs for this model by default (on CUDA)."""
        if not self.is_multimodal:
            return True
        return any(a in _MULTIMODAL_PREFILL_GRAPH_ARCHS for a in self.architectures)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.moe.layers > 0


@dataclass(frozen=True, slots=True)
class ParamCounts:
    """Parameter counts by part; norms and biases (well under 0.1%) are left out."""

    embedding: int
    lm_head: int
    attention: int
    recurrent: int
    mlp: int
    experts: int  # all routed experts
    experts_active: int  # routed experts used by one token
    shared_experts: int
    router: int
    vision: int
    mtp: int

    @property
    def decoder_linear(self) -> int:
        """Decoder matmul weights (the part fp8/fp4 quantization applies to)."""
        return self.attention + self.recurrent + self.mlp + self.experts + self.shared_experts + self.router

    @property
    def text(self) -> int:
        return self.embedding + self.lm_head + self.decoder_linear

    @property
    def total(self) -> int:
        """Everything in the checkpoint: text, vision tower and MTP head."""
        return self.text + self.vision + self.mtp

    @property
    def active(self) -> int:
        """Text parameters one token touches (routed experts counted at top-k), embedding included."""
        return self.text - self.experts + self.experts_active

    @property
    def compute(self) -> int:
        """Parameters that cost 2 FLOPs per token: active ones minus the embedding lookup."""
        return self.active - self.embedding


def param_counts(spec: ModelSpec) -> ParamCounts:
    """Parameters by part (docs/reference/hardware.md §2.1 breaks the 27B down the same way)."""
    h = spec.hidden
    emb = spec.vocab * h
    attn_layer = spec.attention.params_per_layer(h)
    rec = spec.recurrent
    mlp_layer = spec.mlp.params_per_layer(h) if spec.mlp else 0
    experts = experts_active = shared = router = 0
    moe_layer_params = 0
    if spec.moe:
        m = spec.moe
        experts = m.layers * m.experts * m.expert_params(h)
        experts_active = m.layers * m.top_k * m.expert_params(h)
        shared = m.layers * m.shared_params(h)
        router = m.layers * h * m.experts
        moe_layer_params = m.experts * m.expert_params(h) + m.shared_params(h) + h * m.experts
    # an MTP layer is one full-attention decoder layer with the model's FFN, plus a 2h -> h projection
    ffn_layer = moe_layer_params if spec.moe else mlp_layer
    mtp = spec.mtp_layers * (attn_layer + ffn_layer + 2 * h * h)
    return ParamCounts(
        embedding=emb,
        lm_head=0 if spec.tied_embeddings else emb,
        attention=spec.attention.layers * attn_layer,
        recurrent=rec.layers * rec.params_per_layer(h) if rec else 0,
        mlp=(spec.mlp.layers * mlp_layer) if spec.mlp else 0,
        experts=experts,
        experts_active=experts_active,
        shared_experts=shared,
        router=router,
        vision=spec.vision_params,
        mtp=mtp,
    )


@dataclass(frozen=True, slots=True)
class WeightBytes:
    """Weight bytes for the whole model (divide by TP for one GPU)."""

    resident: float  # loaded on the GPUs: text + vision (the MTP head only loads with speculative decoding)
    read_dense: float  # read by every decode step: non-expert decoder linears + lm_head
    read_experts: float  # all routed experts; a step reads the share its tokens touch


def weight_bytes(spec: ModelSpec, dtype: WeightDtype | None = None) -> WeightBytes:
    """Bytes of weights when decoder linears are stored as ``dtype`` (embeddings, lm_head, vision stay bf16)."""
    wb = WEIGHT_BYTES[dtype or spec.weight_dtype]
    p = param_counts(spec)
    bf16 = WEIGHT_BYTES["bf16"]
    dense_linear = p.decoder_linear - p.experts
    resident = p.decoder_linear * wb + (p.embedding + p.lm_head + p.vision) * bf16
    lm_head_read = (p.lm_head or p.embedding) * bf16  # a tied head still reads the table once per step
    return WeightBytes(resident=resident, read_dense=dense_linear * wb + lm_head_read, read_experts=p.experts * wb)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: KvDtype = "bf16", tp: int = 1) -> int:
    """KV bytes per token on one GPU (full-attention layers only; KV heads replicate when TP > kv_heads)."""
    a = spec.attention
    heads = max(1, a.kv_heads // tp)
    return heads * (a.head_dim + a.v_head_dim) * a.layers * KV_BYTES[kv_dtype]


def state_bytes_per_slot(
    spec: ModelSpec, ssm_dtype: StateDtype | None = None, conv_dtype: StateDtype = "bf16", tp: int = 1
) -> int:
    """Bytes of one Mamba/GDN state slot on one GPU (SGLang ``mamba_cache_per_req``); 0 for pure transformers."""
    conv, ssm = state_bytes_split(spec, ssm_dtype, conv_dtype, tp)
    return conv + ssm


def state_bytes_split(
    spec: ModelSpec, ssm_dtype: StateDtype | None = None, conv_dtype: StateDtype = "bf16", tp: int = 1
) -> tuple[int, int]:
    """One state slot's convolution and SSM bytes on one GPU, over all recurrent layers; (0, 0) without them."""
    rec = spec.recurrent
    if rec is None or rec.layers == 0:
        return 0, 0
    conv_dim = rec.conv_dim(tp)
    if conv_dim % tp or rec.heads % tp:
        raise ConfigError(
            f"{spec.name}: TP size {tp} does not divide the recurrent layers ({rec.heads} heads, conv width "
            f"{conv_dim}); use a TP size that divides {rec.heads}"
        )
    conv = conv_dim // tp * (rec.conv_kernel - 1) * STATE_BYTES[conv_dtype]
    ssm = rec.heads // tp * rec.head_dim * rec.state_size * STATE_BYTES[ssm_dtype or spec.ssm_dtype]
    return conv * rec.layers, ssm * rec.layers


def decode_flops_per_token(spec: ModelSpec, context: float) -> float:
    """FLOPs to decode one token at ``context`` tokens of history (whole model, all GPUs together)."""
    p = param_counts(spec)
    a = spec.attention
    attn = 4.0 * a.heads * a.head_dim * context * a.layers
    rec = spec.recurrent
    recurrent = float(RECURRENT_FLOPS_PER_STATE_ELEMENT * rec.state_elements() * rec.layers) if rec else 0.0
    return 2.0 * p.compute + attn + recurrent


# --------------------------------------------------------------------------------------------------
# config.json -> ModelSpec


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
    mlp = (
        Mlp(layers=count["mlp"], intermediate=r.int("intermediate_size", "ffn_hidden_size"), gated=gated_mlp)
        if count["mlp"]
        else None
    )
    moe = (
        Moe(
            layers=count["moe"],
            experts=r.int("num_experts", "num_local_experts", "n_routed_experts"),
            top_k=r.int("num_experts_per_tok", "moe_topk"),
            expert_intermediate=r.int("moe_intermediate_size"),
            shared_intermediate=r.int(
                "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size", default=0
            ),
            gated=gated_mlp,
        )
        if count["moe"]
        else None
    )
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
        weight_dtype=_checkpoint_dtype(cfg),
        architectures=tuple(str(a) for a in architectures) if isinstance(architectures, list) else (),
        text_subconfig=r.nested,
        vision=_vision_sizing(vision_cfg) if isinstance(vision_cfg, Mapping) else None,
        **meta,
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
