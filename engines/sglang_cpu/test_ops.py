"""The stand-in's Gated-DeltaNet kernels against a naive, token-by-token reading of the same math.

Run with the SGLang environment: ``.sglang-venv/bin/python -m pytest engines/sglang_cpu``. The references
below loop over sequences, heads and tokens with nothing but vector operations, and are called the way the
model defines the computation (whole sequences from a zero state), while the kernels are called the way
SGLang's CPU backend calls them (varlen batches, state pools indexed by slot, prefill chunks and decode
steps), so agreement also checks the state handling.
"""

from __future__ import annotations

import math

import pytest
import sgl_kernel  # noqa: F401  (registers torch.ops.sgl_kernel.*)
import torch
import torch.nn.functional as F
from sgl_kernel.mamba import causal_conv1d_fn_cpu, causal_conv1d_update_cpu, chunk_gated_delta_rule_cpu
from torch import Tensor

OPS = torch.ops.sgl_kernel
HK, HV, DK, DV, K = 2, 4, 16, 8, 4
DIM = 2 * HK * DK + HV * DV
SLOTS = 6
ATOL = 2e-5


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, gen: torch.Generator, scale: float = 1.0) -> Tensor:
    return torch.randn(*shape, generator=gen) * scale


def _params(gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """A_log and dt_bias as a model holds them."""
    return torch.rand(HV, generator=gen).mul(15.99).add(0.01).log(), _randn(HV, gen=gen)


# --- naive references -------------------------------------------------------------------------------


def naive_gates(A_log: Tensor, a: Tensor, b: Tensor, dt_bias: Tensor) -> tuple[Tensor, Tensor]:
    """Elementwise, with the softplus written out (linear above 20)."""
    g, beta = torch.empty(a.shape), torch.empty(b.shape)
    for idx in range(a.numel()):
        t, h = divmod(idx, a.shape[-1])
        x = float(a[t, h]) + float(dt_bias[h])
        softplus = x if x > 20.0 else math.log1p(math.exp(x))
        g[t, h] = -math.exp(float(A_log[h])) * softplus
        beta[t, h] = 1.0 / (1.0 + math.exp(-float(b[t, h])))
    return g, beta


def naive_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One sequence: q, k ``[T, HK, DK]``, v ``[T, HV, DV]``, g, beta ``[T, HV]``; state ``[HV, DV, DK]``."""
    state = torch.zeros(HV, DV, DK) if state is None else state.clone()
    out = torch.zeros(q.shape[0], HV, DV)
    for h in range(HV):
        kh = h // (HV // HK)
        s = state[h]
        for t in range(q.shape[0]):
            qt = q[t, kh] / torch.sqrt((q[t, kh] ** 2).sum() + 1e-6) / math.sqrt(DK)
            kt = k[t, kh] / torch.sqrt((k[t, kh] ** 2).sum() + 1e-6)
            s = s * math.exp(float(g[t, h]))
            s = s + float(beta[t, h]) * torch.outer(v[t, h] - s @ kt, kt)
            out[t, h] = s @ qt
        state[h] = s
    return out, state


def naive_conv(
    x: Tensor, weight: Tensor, history: Tensor | None = None, bias: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One sequence, x ``[DIM, T]``: SiLU of the causal depthwise convolution; also the last K-1 inputs."""
    history = torch.zeros(x.shape[0], K - 1) if history is None else history
    window = torch.cat([history, x], dim=1)
    out = torch.zeros_like(x)
    for t in range(x.shape[1]):
        if bias is not None:
            out[:, t] += bias
        for j in range(K):
            out[:, t] += weight[:, j] * window[:, t + j]
    return F.silu(out), window[:, -(K - 1) :]


def _sequence(length: int, gen: torch.Generator) -> dict[str, Tensor]:
    """Random per-token inputs of one sequence (a, b raw projections; gates computed from them)."""
    return {
        "q": _randn(length, HK, DK, gen=gen),
        "k": _randn(length, HK, DK, gen=gen),
        "v": _randn(length, HV, DV, gen=gen),
        "a": _randn(length, HV, gen=gen),
        "b": _randn(length, HV, gen=gen),
    }


def _cat(seqs: list[dict[str, Tensor]], key: str) -> Tensor:
    return torch.cat([s[key] for s in seqs])


def _cu(lengths: list[int]) -> Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


# --- gates and norm ---------------------------------------------------------------------------------


def test_gdn_gating_matches_formula() -> None:
    gen = _gen(0)
    A_log, dt_bias = _params(gen)
    a, b = _randn(9, HV, gen=gen, scale=8.0), _randn(9, HV, gen=gen, scale=4.0)
    a[0, 0] = 30.0  # past the softplus threshold
    g, beta = OPS.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    want_g, want_beta = naive_gates(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, 9, HV) and g.dtype == beta.dtype == torch.float32
    torch.testing.assert_close(g[0], want_g, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(beta[0], want_beta, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_gated_matches_transformers(dtype: torch.dtype) -> None:
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated

    gen = _gen(1)
    norm = Qwen3NextRMSNormGated(DV, eps=1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(_randn(DV, gen=gen))
    x, z = _randn(12, DV, gen=gen).to(dtype), _randn(12, DV, gen=gen).to(dtype)
    with torch.no_grad():
        want = norm(x, z)
    got = OPS.fused_rmsnorm_gated_cpu(x, norm.weight.detach(), z, 1e-6)
    assert got.dtype == dtype
    assert torch.equal(got, want)


# --- the recurrence ---------------------------------------------------------------------------------


def test_prefill_varlen_batch_with_slots() -> None:
    """Three sequences across chunk boundaries, one starting from a stored state, one padding row."""
    gen = _gen(2)
    A_log, dt_bias = _params(gen)
    lengths, slots = [1, 70, 150, 5], [4, 0, 2, -1]
    seqs = [_sequence(n, gen) for n in lengths]
    pool = _randn(SLOTS, HV, DV, DK, gen=gen, scale=0.3)
    before = pool.clone()

    g, beta = OPS.fused_gdn_gating_cpu(A_log, _cat(seqs, "a"), _cat(seqs, "b"), dt_bias)
    out, finals, _ = chunk_gated_delta_rule_cpu(
        q=_cat(seqs, "q")[None],
        k=_cat(seqs, "k")[None],
        v=_cat(seqs, "v")[None],
        g=g,
        beta=beta,
        initial_state=pool,
        cu_seqlens=_cu(lengths),
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor(slots),
    )
    assert out.shape == (1, sum(lengths), HV, DV)
    begin = 0
    for seq, n, slot in zip(seqs, lengths, slots, strict=True):
        if slot < 0:
            assert torch.all(out[0, begin : begin + n] == 0)
        else:
            sg, sb = naive_gates(A_log, seq["a"], seq["b"], dt_bias)
            want, state = naive_delta_rule(seq["q"], seq["k"], seq["v"], sg, sb, before[slot])
            torch.testing.assert_close(out[0, begin : begin + n], want, atol=ATOL, rtol=1e-4)
            torch.testing.assert_close(pool[slot], state, atol=ATOL, rtol=1e-4)
        begin += n
    for untouched in (1, 3, 5):
        assert torch.equal(pool[untouched], before[untouched])
    assert finals.shape == (len(lengths), HV, DV, DK)


def test_decode_batch_updates_slots_in_place() -> None:
    """A decode batch: one token per sequence, states at scattered slots, a padding row."""
    gen = _gen(3)
    A_log, dt_bias = _params(gen)
    slots = [3, -1, 0, 5]
    seq = _sequence(len(slots), gen)
    pool = _randn(SLOTS, HV, DV, DK, gen=gen, scale=0.3)
    before = pool.clone()
    out = OPS.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log,
        dt_bias=dt_bias,
        q=seq["q"][None],
        k=seq["k"][None],
        v=seq["v"][None],
        a=seq["a"],
        b=seq["b"],
        initial_state_source=pool,
        initial_state_indices=torch.tensor(slots, dtype=torch.int32),
        cu_seqlens=torch.arange(len(slots) + 1, dtype=torch.int32),
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
    )
    assert out.shape == (1, len(slots), HV, DV)
    g, beta = naive_gates(A_log, seq["a"], seq["b"], dt_bias)
    for row, slot in enumerate(slots):
        if slot < 0:
            assert torch.all(out[0, row] == 0)
            continue
        tok = slice(row, row + 1)
        want, state = naive_delta_rule(seq["q"][tok], seq["k"][tok], seq["v"][tok], g[tok], beta[tok], before[slot])
        torch.testing.assert_close(out[0, row], want[0], atol=ATOL, rtol=1e-4)
        torch.testing.assert_close(pool[slot], state, atol=ATOL, rtol=1e-4)
    for untouched in (1, 2, 4):
        assert torch.equal(pool[untouched], before[untouched])


def test_recurrent_op_with_uneven_sequences() -> None:
    gen = _gen(4)
    A_log, dt_bias = _params(gen)
    lengths, slots = [3, 1, 4], [1, 2, 0]
    seqs = [_sequence(n, gen) for n in lengths]
    pool = torch.zeros(SLOTS, HV, DV, DK)
    out = OPS.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log,
        dt_bias,
        _cat(seqs, "q")[None],
        _cat(seqs, "k")[None],
        _cat(seqs, "v")[None],
        _cat(seqs, "a"),
        _cat(seqs, "b"),
        pool,
        torch.tensor(slots),
        _cu(lengths),
        True,
    )
    begin = 0
    for seq, n, slot in zip(seqs, lengths, slots, strict=True):
        g, beta = naive_gates(A_log, seq["a"], seq["b"], dt_bias)
        want, state = naive_delta_rule(seq["q"], seq["k"], seq["v"], g, beta)
        torch.testing.assert_close(out[0, begin : begin + n], want, atol=ATOL, rtol=1e-4)
        torch.testing.assert_close(pool[slot], state, atol=ATOL, rtol=1e-4)
        begin += n


def test_chunked_prefill_then_decode_equals_one_pass() -> None:
    """A 200-token prompt prefilled in server chunks (90 + 90 + 20), then 6 decode steps, from slot 3."""
    gen = _gen(5)
    A_log, dt_bias = _params(gen)
    seq = _sequence(206, gen)
    g_all, beta_all = naive_gates(A_log, seq["a"], seq["b"], dt_bias)
    want, want_state = naive_delta_rule(seq["q"], seq["k"], seq["v"], g_all, beta_all)

    pool, slot = torch.zeros(SLOTS, HV, DV, DK), 3
    got = []
    for begin, end in ((0, 90), (90, 180), (180, 200)):
        part = {key: value[begin:end] for key, value in seq.items()}
        g, beta = OPS.fused_gdn_gating_cpu(A_log, part["a"], part["b"], dt_bias)
        out, _, _ = chunk_gated_delta_rule_cpu(
            part["q"][None], part["k"][None], part["v"][None], g, beta, pool, _cu([end - begin]), False, True,
            torch.tensor([slot]),
        )  # fmt: skip
        got.append(out[0])
    for t in range(200, 206):
        tok = slice(t, t + 1)
        out = OPS.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log, dt_bias, seq["q"][None, tok], seq["k"][None, tok], seq["v"][None, tok], seq["a"][tok],
            seq["b"][tok], pool, torch.tensor([slot]), _cu([1]), True,
        )  # fmt: skip
        got.append(out[0])
    torch.testing.assert_close(torch.cat(got), want, atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(pool[slot], want_state, atol=ATOL, rtol=1e-4)


def test_chunked_rule_matches_transformers() -> None:
    """A second, independent implementation: transformers' chunked form, on a long sequence."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    gen = _gen(6)
    A_log, dt_bias = _params(gen)
    seq = _sequence(300, gen)
    g, beta = OPS.fused_gdn_gating_cpu(A_log, seq["a"], seq["b"], dt_bias)
    start = _randn(HV, DV, DK, gen=gen, scale=0.3)
    pool = start[None].clone()
    out, _, _ = chunk_gated_delta_rule_cpu(
        seq["q"][None], seq["k"][None], seq["v"][None], g, beta, pool, _cu([300]), False, True, torch.tensor([0])
    )
    repeat = HV // HK
    want, want_state = torch_chunk_gated_delta_rule(
        seq["q"][None].repeat_interleave(repeat, dim=2),
        seq["k"][None].repeat_interleave(repeat, dim=2),
        seq["v"][None],
        g=g,
        beta=beta,
        initial_state=start.transpose(-1, -2)[None],  # transformers keeps [Hv, Dk, Dv]
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
    )
    torch.testing.assert_close(out, want, atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(pool[0], want_state[0].transpose(-1, -2), atol=ATOL, rtol=1e-4)


# --- the short convolution --------------------------------------------------------------------------


def test_conv_prefill_varlen_with_initial_states() -> None:
    """Sequences shorter and longer than the window, fresh and continuing, plus a padding row."""
    gen = _gen(7)
    weight = _randn(DIM, K, gen=gen)
    lengths, slots, resume = [1, 2, 9, 5, 3], [2, 0, 5, 1, -1], [True, False, True, False, False]
    xs = [_randn(DIM, n, gen=gen) for n in lengths]
    pool = _randn(SLOTS, DIM, K - 1, gen=gen)
    before = pool.clone()
    out = causal_conv1d_fn_cpu(
        torch.cat(xs, dim=1).t().contiguous().t(),  # SGLang passes a transposed [T, DIM] tensor
        weight,
        None,
        activation="silu",
        conv_states=pool,
        has_initial_state=torch.tensor(resume),
        cache_indices=torch.tensor(slots, dtype=torch.int32),
        query_start_loc=_cu(lengths),
        seq_lens_cpu=lengths,
    )
    begin = 0
    for x, n, slot, again in zip(xs, lengths, slots, resume, strict=True):
        if slot < 0:
            assert torch.all(out[:, begin : begin + n] == 0)
        else:
            want, tail = naive_conv(x, weight, before[slot] if again else None)
            torch.testing.assert_close(out[:, begin : begin + n], want, atol=1e-5, rtol=1e-5)
            assert torch.equal(pool[slot], tail)
        begin += n
    for untouched in (3, 4):
        assert torch.equal(pool[untouched], before[untouched])


def test_conv_prefill_chunks_then_decode_equal_one_pass() -> None:
    gen = _gen(8)
    weight = _randn(DIM, K, gen=gen)
    x = _randn(DIM, 30, gen=gen)
    want, want_tail = naive_conv(x, weight)
    pool, slot = torch.zeros(SLOTS, DIM, K - 1), 4
    got = []
    for i, (begin, end) in enumerate(((0, 2), (2, 20), (20, 26))):
        got.append(
            causal_conv1d_fn_cpu(
                x[:, begin:end],
                weight,
                None,
                activation="silu",
                conv_states=pool,
                has_initial_state=torch.tensor([i > 0]),
                cache_indices=torch.tensor([slot]),
                query_start_loc=_cu([end - begin]),
            )
        )
    for t in range(26, 30):
        got.append(causal_conv1d_update_cpu(x[None, :, t], pool, weight, None, "silu", torch.tensor([slot])).t())
    torch.testing.assert_close(torch.cat(got, dim=1), want, atol=1e-5, rtol=1e-5)
    assert torch.equal(pool[slot], want_tail)


def test_conv_update_batch_with_padding() -> None:
    gen = _gen(9)
    weight, bias = _randn(DIM, K, gen=gen), _randn(DIM, gen=gen)
    slots = [5, -1, 1]
    x = _randn(len(slots), DIM, gen=gen)
    pool = _randn(SLOTS, DIM, K - 1, gen=gen)
    before = pool.clone()
    out = causal_conv1d_update_cpu(x, pool, weight, bias, "silu", conv_state_indices=torch.tensor(slots))
    assert out.shape == x.shape
    for row, slot in enumerate(slots):
        if slot < 0:
            assert torch.all(out[row] == 0)
            continue
        want, tail = naive_conv(x[row, :, None], weight, before[slot], bias)
        torch.testing.assert_close(out[row], want[:, 0], atol=1e-5, rtol=1e-5)
        assert torch.equal(pool[slot], tail)
    for untouched in (0, 2, 3, 4):
        assert torch.equal(pool[untouched], before[untouched])
