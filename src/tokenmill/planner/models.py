"""Model geometry (a Hugging Face ``config.json`` as the planner needs it), and what follows from it.

:class:`ModelSpec` holds layer counts by kind, head geometry and the FFN/MoE shape
(:func:`tokenmill.planner.hfconfig.from_hf_config` reads it from a config); the functions below derive
parameters, weight bytes, KV bytes per token, recurrent-state bytes per request slot and FLOPs per decode
token. All of it is pure; reading the bundled configs from disk lives in :mod:`tokenmill.planner.catalog`.

Formulas (docs/planner.md; reference docs/reference/hardware.md §2-§3, docs/reference/sglang.md §2.2):

* KV bytes/token = ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * n_attention_layers * bytes(kv)``;
  only full-attention layers hold KV (SGLang's hybrid pool covers ``full_attention_layer_ids`` only).
* State bytes/slot (SGLang ``Mamba2StateShape``) = ``n_linear_layers * (conv_dim/tp * (K-1) * bytes(conv)
  + heads/tp * head_dim * state_size * bytes(ssm))`` with ``conv_dim = heads*head_dim + 2*n_groups*state``.
  A GDN layer maps to it as heads = value heads, head_dim = value head dim, state = key head dim,
  n_groups = key heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
    ssm_dtype_from_config: bool = False  # the config names mamba_ssm_dtype (else fp32 is SGLang's default)
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
