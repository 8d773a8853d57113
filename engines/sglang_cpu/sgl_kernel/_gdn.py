"""Gated DeltaNet and its short causal convolution, in plain PyTorch (the math behind the stand-in's kernels).

Notation, per value head: the recurrent state ``S`` is a ``[Dv, Dk]`` matrix (SGLang's layout: slot, head,
value dim, key dim). For each token, with key ``k``, query ``q`` (both L2-normalised, ``q`` scaled by
``Dk ** -0.5``), value ``v``, log-decay ``g <= 0`` and write strength ``beta`` in (0, 1)::

    S   <- exp(g) * S                      # forget
    S   <- S + beta * (v - S k) k^T         # delta rule: move S k towards v
    out  = S q

Key heads are shared by ``Hv / Hk`` consecutive value heads. Everything is computed in float32; outputs are
cast to the value dtype by the callers.

:func:`chunked_delta_rule` evaluates the same recurrence a chunk of tokens at a time (the within-chunk part
as lower-triangular matrix algebra, only the chunk-to-chunk state update sequential); the step-by-step
:func:`recurrent_delta_rule` is used for decoding and as the reference in the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

L2_EPS = 1e-6
CHUNK = 64
SILU_NAMES = ("silu", "swish")


def l2_normalize(x: Tensor, eps: float = L2_EPS) -> Tensor:
    """``x / sqrt(sum(x^2) + eps)`` over the last dimension."""
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


def gates(
    A_log: Tensor,
    a: Tensor,
    b: Tensor,
    dt_bias: Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
) -> tuple[Tensor, Tensor]:
    """The per-token, per-value-head gates from the projections ``a`` and ``b`` (``[..., Hv]``).

    Returns ``g = -exp(A_log) * softplus(a + dt_bias)`` (the log of the state's decay) and
    ``beta = sigmoid(b)``, both float32; ``beta`` is rounded through ``b``'s dtype, as the GPU kernel stores it.
    """
    x = a.float() + dt_bias.float()
    g = -torch.exp(A_log.float()) * F.softplus(x, beta=softplus_beta, threshold=softplus_threshold)
    beta = torch.sigmoid(b.float()).to(b.dtype).float()
    return g, beta


def prepare_qk(q: Tensor, k: Tensor, num_v_heads: int, normalize: bool) -> tuple[Tensor, Tensor]:
    """float32 queries and keys (``[..., Hk, Dk]``) repeated to one per value head, normalised and scaled."""
    q, k = q.float(), k.float()
    if normalize:
        q, k = l2_normalize(q), l2_normalize(k)
    group = num_v_heads // k.shape[-2]
    if group > 1:
        q = q.repeat_interleave(group, dim=-2)
        k = k.repeat_interleave(group, dim=-2)
    return q * q.shape[-1] ** -0.5, k


def recurrent_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """Run the recurrence token by token for a batch of equally long sequences.

    ``q``, ``k``: ``[N, L, Hv, Dk]`` (prepared by :func:`prepare_qk`); ``v``: ``[N, L, Hv, Dv]``; ``g``, ``beta``:
    ``[N, L, Hv]``; ``state``: ``[N, Hv, Dv, Dk]``. Returns the outputs ``[N, L, Hv, Dv]`` and the final state,
    all float32; the inputs are not modified.
    """
    s = state.float()
    v = v.float()
    out = torch.zeros_like(v)
    for t in range(q.shape[1]):
        s = s * torch.exp(g[:, t])[..., None, None]
        k_t = k[:, t]
        predicted = torch.einsum("nhvk,nhk->nhv", s, k_t)
        correction = (v[:, t] - predicted) * beta[:, t, :, None]
        s = s + correction[..., :, None] * k_t[..., None, :]
        out[:, t] = torch.einsum("nhvk,nhk->nhv", s, q[:, t])
    return out, s


def chunked_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, chunk: int = CHUNK
) -> tuple[Tensor, Tensor]:
    """The recurrence for one sequence, ``chunk`` tokens at a time.

    ``q``, ``k``: ``[T, Hv, Dk]`` (prepared); ``v``: ``[T, Hv, Dv]``; ``g``, ``beta``: ``[T, Hv]``; ``state``:
    ``[Hv, Dv, Dk]``. Returns ``([T, Hv, Dv], [Hv, Dv, Dk])`` in float32.

    Within a chunk starting from state ``S0``, with ``G_t`` the cumulative log-decay up to token ``t``, the
    per-token corrections ``u_t = beta_t (v_t - exp(g_t) S_{t-1} k_t)`` solve the unit lower-triangular system
    ``(I + A) U = beta V - beta exp(G) K S0^T`` with ``A[t, s] = beta_t exp(G_t - G_s) k_t.k_s`` for ``s < t``.
    Then ``out_t = exp(G_t) S0 q_t + sum_{s <= t} exp(G_t - G_s) (q_t.k_s) u_s`` and the chunk's final state is
    ``exp(G_last) S0 + sum_s exp(G_last - G_s) u_s k_s^T``.
    """
    length = q.shape[0]
    pad = (-length) % chunk
    # [Hv, n, C, D]: heads first, then chunks. Padding tokens (k = 0, beta = 0, g = 0) leave the state alone.
    q, k, v = (F.pad(x.float(), (0, 0, 0, 0, 0, pad)).transpose(0, 1).unflatten(1, (-1, chunk)) for x in (q, k, v))
    g, beta = (F.pad(x.float(), (0, 0, 0, pad)).transpose(0, 1).unflatten(1, (-1, chunk)) for x in (g, beta))

    cum = g.cumsum(dim=-1)  # G
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    # exp(G_t - G_s) for s <= t, 0 above the diagonal (masked before exp, so it cannot overflow)
    decay = torch.exp((cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")))

    strictly_lower = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).tril(diagonal=-1)
    system = strictly_lower + torch.eye(chunk, dtype=q.dtype, device=q.device)
    u_from_values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    u_from_state = torch.linalg.solve_triangular(
        system, k * (beta * torch.exp(cum))[..., None], upper=False, unitriangular=True
    )
    scores = (q @ k.transpose(-1, -2)) * decay  # (q_t . k_s) exp(G_t - G_s), s <= t
    q_decayed = q * torch.exp(cum)[..., None]
    k_to_end = k * torch.exp(cum[..., -1:] - cum)[..., None]
    chunk_decay = torch.exp(cum[..., -1])  # [Hv, n]

    s_t = state.float().transpose(-1, -2)  # S^T: [Hv, Dk, Dv]
    outs = []
    for i in range(q.shape[1]):
        u = u_from_values[:, i] - u_from_state[:, i] @ s_t
        outs.append(q_decayed[:, i] @ s_t + scores[:, i] @ u)
        s_t = s_t * chunk_decay[:, i, None, None] + k_to_end[:, i].transpose(-1, -2) @ u
    out = torch.cat(outs, dim=1)[:, :length].transpose(0, 1)  # [T, Hv, Dv]
    return out, s_t.transpose(-1, -2)


def causal_conv(x: Tensor, history: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None) -> Tensor:
    """Depthwise causal convolution of ``x`` (``[..., dim, L]``) continuing after ``history`` (``[..., dim, K-1]``).

    ``out[..., c, t] = bias[c] + sum_j weight[c, j] * window[..., c, t + j]`` over the concatenated window,
    then SiLU if ``activation`` names it; float32.
    """
    window = torch.cat([history.float(), x.float()], dim=-1)
    taps = window.unfold(-1, weight.shape[-1], 1)  # [..., dim, L, K]
    out = (taps * weight.float()[:, None, :]).sum(dim=-1)
    if bias is not None:
        out = out + bias.float()[:, None]
    if activation in SILU_NAMES:
        out = F.silu(out)
    elif activation is not None:
        raise NotImplementedError(f"causal conv activation {activation!r}")
    return out
