"""``sgl_kernel.mamba``: the Gated-DeltaNet prefill kernels SGLang's CPU path imports, in plain PyTorch.

SGLang 0.5.23 (``layers/attention/linear/gdn_backend.py`` and ``kernels/gdn_triton.py``) calls these with the
state pools of one layer and the batch's slot indices; the states are read and written in place at those
slots. Layouts, as SGLang's ``MambaPool`` holds them:

- conv state: ``[slots, dim, K-1]``, the last ``K-1`` inputs of the short convolution (``dim = 2*Hk*Dk + Hv*Dv``);
- recurrent (SSM) state: ``[slots, Hv, Dv, Dk]``, float32 by default.

A batch is "varlen": the tokens of all sequences are concatenated and ``query_start_loc`` / ``cu_seqlens``
(``[N+1]``) marks where each begins. A slot index of -1 (SGLang's ``PAD_SLOT_ID``) marks a padding row, which
reads no state, writes none and gets a zero output.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import Tensor

from sgl_kernel import _gdn

PAD_SLOT_ID = -1


def _boundaries(starts: Tensor | None, total: int) -> list[tuple[int, int]]:
    """``[(begin, end)]`` of each sequence from cumulative start offsets (one sequence when there are none)."""
    if starts is None:
        return [(0, total)]
    offsets = [int(x) for x in starts.tolist()]
    return list(itertools.pairwise(offsets))


def _slots(indices: Tensor | None, count: int) -> list[int]:
    """The state slot of each of ``count`` sequences (the identity when no indices are given)."""
    if indices is None:
        return list(range(count))
    return [int(x) for x in indices[:count].tolist()]


def causal_conv1d_fn_cpu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    conv_states: Tensor | None = None,
    has_initial_state: Tensor | None = None,
    cache_indices: Tensor | None = None,
    query_start_loc: Tensor | None = None,
    seq_lens_cpu: list[int] | None = None,
    **_unused: Any,
) -> Tensor:
    """Prefill convolution over a varlen batch; returns ``[dim, T]`` in ``x``'s dtype.

    ``x``: ``[dim, T]`` (all sequences' tokens); ``weight``: ``[dim, K]``. A sequence continues from its slot's
    conv state when ``has_initial_state`` says so (a chunked or prefix-cached prefill), else from zeros; its
    slot then holds its last ``K-1`` inputs.
    """
    width = weight.shape[-1] - 1
    out = torch.zeros_like(x)
    spans = _boundaries(query_start_loc, x.shape[-1])
    for i, ((begin, end), slot) in enumerate(zip(spans, _slots(cache_indices, len(spans)), strict=True)):
        if slot == PAD_SLOT_ID or end == begin:
            continue
        segment = x[:, begin:end]
        resume = conv_states is not None and has_initial_state is not None and bool(has_initial_state[i])
        history = conv_states[slot] if resume else segment.new_zeros(segment.shape[0], width)
        out[:, begin:end] = _gdn.causal_conv(segment, history, weight, bias, activation).to(x.dtype)
        if conv_states is not None:
            window = torch.cat([history.to(segment.dtype), segment], dim=-1)
            conv_states[slot] = window[:, -width:].to(conv_states.dtype)
    return out


def causal_conv1d_update_cpu(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    conv_state_indices: Tensor | None = None,
    **_unused: Any,
) -> Tensor:
    """Decode convolution: ``x`` is ``[B, dim]`` (one new token per row) or ``[B, dim, L]``.

    Each row continues from the conv state at its slot and leaves its last ``K-1`` inputs there. Returns a
    tensor shaped like ``x``.
    """
    tokens = x if x.dim() == 3 else x[..., None]
    width = weight.shape[-1] - 1
    slots = (
        conv_state_indices.long() if conv_state_indices is not None else torch.arange(tokens.shape[0], device=x.device)
    )
    valid = slots != PAD_SLOT_ID
    history = conv_state[slots.clamp(min=0)] * valid[:, None, None]
    out = _gdn.causal_conv(tokens, history, weight, bias, activation).to(x.dtype)
    window = torch.cat([history.to(tokens.dtype), tokens], dim=-1)[..., -width:]
    conv_state[slots[valid]] = window[valid].to(conv_state.dtype)
    out = out * valid[:, None, None]
    return out if x.dim() == 3 else out[..., 0]


def chunk_gated_delta_rule_cpu(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    initial_state: Tensor | None = None,
    cu_seqlens: Tensor | None = None,
    head_first: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    initial_state_indices: Tensor | None = None,
    **_unused: Any,
) -> tuple[Tensor, Tensor, None]:
    """Prefill Gated DeltaNet over a varlen batch (chunked form, see :func:`sgl_kernel._gdn.chunked_delta_rule`).

    ``q``, ``k``: ``[1, T, Hk, Dk]``; ``v``: ``[1, T, Hv, Dv]``; ``g`` (log-decay), ``beta``: ``[1, T, Hv]`` as
    ``fused_gdn_gating_cpu`` returns them. ``initial_state`` is the layer's state pool ``[slots, Hv, Dv, Dk]``
    read and updated in place at ``initial_state_indices`` (or one state per sequence without indices).
    Returns ``(out [1, T, Hv, Dv], final states [N, Hv, Dv, Dk], None)``: the last item stands for the
    per-chunk states, which this implementation does not provide.
    """
    if head_first:
        raise NotImplementedError("chunk_gated_delta_rule_cpu: head_first layout")
    num_v_heads, head_v_dim, head_k_dim = v.shape[-2], v.shape[-1], k.shape[-1]
    qs, ks = _gdn.prepare_qk(
        q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]), num_v_heads, use_qk_l2norm_in_kernel
    )
    vs = v.reshape(-1, num_v_heads, head_v_dim)
    gs, betas = g.reshape(-1, num_v_heads).float(), beta.reshape(-1, num_v_heads).float()
    out = torch.zeros(vs.shape, dtype=torch.float32, device=v.device)
    spans = _boundaries(cu_seqlens, vs.shape[0])
    finals = []
    for (begin, end), slot in zip(spans, _slots(initial_state_indices, len(spans)), strict=True):
        state = (
            initial_state[slot].float()
            if initial_state is not None and slot != PAD_SLOT_ID
            else vs.new_zeros(num_v_heads, head_v_dim, head_k_dim, dtype=torch.float32)
        )
        if slot != PAD_SLOT_ID and end > begin:
            seq = slice(begin, end)
            out[seq], state = _gdn.chunked_delta_rule(qs[seq], ks[seq], vs[seq], gs[seq], betas[seq], state)
            if initial_state is not None:
                initial_state[slot] = state.to(initial_state.dtype)
        finals.append(state)
    return out.to(v.dtype).reshape(v.shape), torch.stack(finals), None
