"""``torch.ops.sgl_kernel.*``: the CPU ops SGLang 0.5.23 calls for Gated DeltaNet, registered with torch.library.

SGLang looks these up as ``torch.ops.sgl_kernel.<name>`` (some at import time, some with keyword arguments),
so each is defined with the schema and argument names of its call site:

- ``fused_gdn_gating_cpu(A_log, a, b, dt_bias) -> (g, beta)``: prefill gates (``gdn_backend.py``);
- ``fused_sigmoid_gating_delta_rule_update_cpu(...)``: decode, gates and recurrence in one, updating the
  state pool in place (``kernels/gdn_triton.py``);
- ``fused_rmsnorm_gated_cpu(x, weight, g, eps)``: the gated RMSNorm after the recurrence
  (``FusedRMSNormGated``, reached through the fix-up in ``sitecustomize``).

Importing this module registers them (``import sgl_kernel`` does).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor

from sgl_kernel import _gdn
from sgl_kernel.mamba import PAD_SLOT_ID

NAMESPACE = "sgl_kernel"
SCHEMAS = {
    "fused_gdn_gating_cpu": (
        "fused_gdn_gating_cpu(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias, float softplus_beta=1.0, "
        "float softplus_threshold=20.0) -> (Tensor, Tensor)"
    ),
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        "fused_sigmoid_gating_delta_rule_update_cpu(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, "
        "Tensor a, Tensor b, Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor? cu_seqlens, "
        "bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0) -> Tensor"
    ),
    "fused_rmsnorm_gated_cpu": "fused_rmsnorm_gated_cpu(Tensor x, Tensor weight, Tensor g, float eps) -> Tensor",
}


def fused_gdn_gating(
    A_log: Tensor,
    a: Tensor,
    b: Tensor,
    dt_bias: Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[Tensor, Tensor]:
    """Gates for ``T`` tokens (``a``, ``b``: ``[T, Hv]``): ``g`` and ``beta``, float32, shaped ``[1, T, Hv]``."""
    g, beta = _gdn.gates(A_log, a, b, dt_bias, softplus_beta, softplus_threshold)
    return g.reshape(1, *a.shape), beta.reshape(1, *b.shape)


def fused_sigmoid_gating_delta_rule_update(
    A_log: Tensor,
    dt_bias: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    a: Tensor,
    b: Tensor,
    initial_state_source: Tensor,
    initial_state_indices: Tensor,
    cu_seqlens: Tensor | None,
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> Tensor:
    """Decode step(s): gates plus the token-by-token recurrence from each sequence's slot state.

    ``q``, ``k``: ``[B, T, Hk, Dk]``; ``v``: ``[B, T, Hv, Dv]``; ``a``, ``b``: one row of ``Hv`` per token. With
    ``cu_seqlens`` the ``B*T`` tokens form ``N = len(cu_seqlens) - 1`` sequences (decode: one token each),
    without it each of the ``B`` rows is a sequence. ``initial_state_source`` ``[slots, Hv, Dv, Dk]`` is read
    and updated in place at ``initial_state_indices``. Returns the outputs, shaped like ``v``.
    """
    num_v_heads, head_v_dim = v.shape[-2:]
    qs, ks = _gdn.prepare_qk(
        q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]), num_v_heads, use_qk_l2norm_in_kernel
    )
    vs = v.reshape(-1, num_v_heads, head_v_dim).float()
    g, beta = _gdn.gates(
        A_log, a.reshape(-1, num_v_heads), b.reshape(-1, num_v_heads), dt_bias, softplus_beta, softplus_threshold
    )
    total = vs.shape[0]
    if total == 0:
        return torch.zeros_like(v)
    starts = cu_seqlens.long() if cu_seqlens is not None else torch.arange(0, total + 1, v.shape[1])
    lengths = starts.diff()
    count = lengths.numel()
    slots = initial_state_indices[:count].long()
    valid = slots != PAD_SLOT_ID
    states = initial_state_source[slots.clamp(min=0)].float() * valid[:, None, None, None]

    out, states = _recur_varlen((qs, ks, vs, g, beta), states, lengths)
    initial_state_source[slots[valid]] = states[valid].to(initial_state_source.dtype)
    token_valid = valid.repeat_interleave(lengths, output_size=total)
    return (out * token_valid[:, None, None]).to(v.dtype).reshape(v.shape)


def _recur_varlen(inputs: tuple[Tensor, ...], states: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The recurrence over concatenated sequences of the given lengths; ``inputs`` are per-token tensors
    (q, k, v, g, beta), ``states`` one per sequence. Returns the per-token outputs and the final states."""
    count, total = lengths.numel(), int(lengths.sum())
    if bool((lengths == lengths[0]).all()):  # decode: all equally long, one batched recurrence
        span = int(lengths[0])
        out, states = _gdn.recurrent_delta_rule(*(x.reshape(count, span, *x.shape[1:]) for x in inputs), states)
        return out.reshape(total, *out.shape[2:]), states
    outs, finals = [], []
    for i, (begin, end) in enumerate(itertools.pairwise([0, *lengths.cumsum(0).tolist()])):
        piece, final = _gdn.recurrent_delta_rule(*(x[None, begin:end] for x in inputs), states[i : i + 1])
        outs.append(piece[0])
        finals.append(final[0])
    return torch.cat(outs), torch.stack(finals)


def fused_rmsnorm_gated(x: Tensor, weight: Tensor, g: Tensor, eps: float) -> Tensor:
    """``weight * rmsnorm(x) * silu(g)`` over the last dimension.

    The rounding follows transformers' ``Qwen3NextRMSNormGated`` (normalise in float32, back to ``x``'s dtype,
    times the weight in that dtype, times ``silu(g)`` in float32, one final cast), so that a bf16 model rounds
    the same way in both.
    """
    dtype = x.dtype
    x32 = x.float()
    normed = (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)).to(dtype)
    return ((weight * normed) * F.silu(g.float())).to(dtype)


IMPLEMENTATIONS = {
    "fused_gdn_gating_cpu": fused_gdn_gating,
    "fused_sigmoid_gating_delta_rule_update_cpu": fused_sigmoid_gating_delta_rule_update,
    "fused_rmsnorm_gated_cpu": fused_rmsnorm_gated,
}


def _register() -> torch.library.Library:
    """Define each op (unless something already did) with one implementation for every device."""
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    namespace = getattr(torch.ops, NAMESPACE)
    for name, schema in SCHEMAS.items():
        if hasattr(namespace, name):
            continue
        library.define(schema)
        library.impl(name, IMPLEMENTATIONS[name], "CompositeExplicitAutograd")
    return library


_LIBRARY = _register()  # kept alive: dropping the Library object would unregister the ops
