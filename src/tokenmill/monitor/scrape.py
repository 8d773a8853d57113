"""One look at one server: its Prometheus ``/metrics`` turned into a typed :class:`ServerSnapshot`.

SGLang and vLLM expose the same facts under different names; each engine has one name map below, from a
snapshot field to the engine's sample name. The engine is recognised from the metric prefixes
(``sglang:`` / ``vllm:``). Counters are looked up by their exposed sample name, which always ends in
``_total`` (the Prometheus parser adds the suffix when a counter is exposed without it). Series with
several label sets (data-parallel ranks, ``finished_reason``) are summed, except fractions, which take
the largest value, i.e. the fullest pool. Label sets that repeat a value are left out first, so nothing is
counted twice: under priority scheduling SGLang writes each gauge once per priority and once more as the
total (``priority=""``), which alone is read; with metrics from every scheduler, the ranks of one
tensor-, pipeline- or expert-parallel group report the same scheduler, and only rank 0 is read.

:func:`scrape` never raises for a server that is down or answers garbage: the snapshot says
``healthy=False`` and carries the reason in ``error``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Engine = Literal["sglang", "vllm", "unknown"]

# snapshot field -> sample name, per engine. A field missing from a map is one that engine lacks.
SGLANG_NAMES: Mapping[str, str] = {
    "running": "sglang:num_running_reqs",
    "queued": "sglang:num_queue_reqs",
    "kv_usage": "sglang:token_usage",
    "state_usage": "sglang:mamba_usage",
    "generation_tokens_total": "sglang:generation_tokens_total",
    "prompt_tokens_total": "sglang:prompt_tokens_total",
    "requests_total": "sglang:num_requests_total",
    "gen_throughput": "sglang:gen_throughput",
    # written only from the first retraction on; absent means none so far (or an older server)
    "preemptions_total": "sglang:num_retracted_requests_total",
    "full_kv_usage": "sglang:full_token_usage",  # hybrids: the full-attention KV pool alone
    "cache_hit_rate": "sglang:cache_hit_rate",
    "kv_tokens_capacity": "sglang:max_total_num_tokens",
    "sum_seq_lens": "sglang:decode_sum_seq_lens",
    "state_slots_used": "sglang:mamba_used_tokens",  # slots, despite the name
    "state_slots_available": "sglang:mamba_available_tokens",
    "state_slots_evictable": "sglang:mamba_evictable_tokens",
    "aborted_total": "sglang:num_aborted_requests_total",
}
# snapshot field -> (sample name, label, label value): one series of a labelled family, summed over the rest
SGLANG_LABELLED: Mapping[str, tuple[str, str, str]] = {
    # updated every scheduler iteration: the live throughput counters (generation_tokens_total moves only
    # when a request finishes)
    "decode_tokens_total": ("sglang:realtime_tokens_total", "mode", "decode"),
    "prefill_tokens_total": ("sglang:realtime_tokens_total", "mode", "prefill_compute"),
    # prompt tokens served from the prefix cache; against prefill_compute, the windowed prefix hit rate
    # (sglang:cache_hit_rate is the last prefill batch's, reset to 0 at every decode log line)
    "prefill_cache_tokens_total": ("sglang:realtime_tokens_total", "mode", "prefill_cache"),
}
VLLM_NAMES: Mapping[str, str] = {
    "running": "vllm:num_requests_running",
    "queued": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "generation_tokens_total": "vllm:generation_tokens_total",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "requests_total": "vllm:request_success_total",  # summed over finished_reason
    "preemptions_total": "vllm:num_preemptions_total",
}
NAME_MAPS: Mapping[Engine, Mapping[str, str]] = {"sglang": SGLANG_NAMES, "vllm": VLLM_NAMES}
LABELLED_MAPS: Mapping[Engine, Mapping[str, tuple[str, str, str]]] = {"sglang": SGLANG_LABELLED}
PREFIXES: Mapping[Engine, str] = {"sglang": "sglang:", "vllm": "vllm:"}
# fractions of a pool: several label sets report the fullest one, not a sum
_MAX_FIELDS = frozenset({"kv_usage", "state_usage", "full_kv_usage", "cache_hit_rate"})


def _family_names() -> frozenset[str]:
    """Every sample name a map reads, with and without ``_total`` (a counter's ``# TYPE`` line has none)."""
    names = {n for m in NAME_MAPS.values() for n in m.values()}
    names |= {spec[0] for m in LABELLED_MAPS.values() for spec in m.values()}
    return frozenset(names | {n.removesuffix("_total") for n in names})


# Only these lines reach the parser: a server's histograms and per-stage series are most of its /metrics
# text and none of it is read here, so the parse cost stays bounded by the name maps, not by the server.
_WANTED = _family_names()


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """What one server reported at ``taken_at``; ``None`` where the server does not expose a value."""

    engine: Engine
    taken_at: float
    healthy: bool
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = None  # fraction 0..1 of the KV pool in use
    state_usage: float | None = None  # fraction 0..1 of the recurrent-state (Mamba) pool, SGLang hybrids
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    requests_total: float | None = None  # finished requests
    gen_throughput: float | None = None  # the server's own tok/s estimate (SGLang)
    preemptions_total: float | None = None  # vLLM preemptions / SGLang retractions
    max_running: int | None = None  # from SGLang's /server_info
    error: str | None = None  # why the snapshot is unhealthy or empty
    full_kv_usage: float | None = None  # fraction of the full-attention KV pool (SGLang hybrids)
    cache_hit_rate: float | None = None  # the last prefill batch's hit rate (SGLang; 0 after a decode log line)
    kv_tokens_capacity: float | None = None  # KV pool size in tokens, summed over DP ranks (SGLang)
    sum_seq_lens: float | None = None  # tokens held by the running requests (SGLang)
    state_slots_used: float | None = None  # recurrent-state slots held (SGLang hybrids)
    state_slots_available: float | None = None
    state_slots_evictable: float | None = None  # held by the prefix cache, reclaimable
    aborted_total: float | None = None
    decode_tokens_total: float | None = None  # live decode counter (SGLang realtime_tokens_total)
    prefill_tokens_total: float | None = None  # live prefill-compute counter
    prefill_cache_tokens_total: float | None = None  # prompt tokens served from the prefix cache (SGLang)
    timed_out: bool = False  # the scrape got no answer in time (a busy server or machine, not a refusal)

    @property
    def kv_pool_usage(self) -> float | None:
        """The KV pool alone: SGLang's ``token_usage`` is the fullest of all pools on newer hybrid builds."""
        return self.full_kv_usage if self.full_kv_usage is not None else self.kv_usage

    @property
    def state_slots_total(self) -> float | None:
        """Size of the recurrent-state pool in slots; ``None`` when the server has none or does not say.

        SGLang exports the slot gauges (and ``mamba_usage``) for every model, at 0 for a pure transformer:
        only a pool of non-zero size means recurrent state.
        """
        parts = (self.state_slots_used, self.state_slots_available, self.state_slots_evictable)
        if self.state_slots_used is None or self.state_slots_available is None:
            return None
        total = math.fsum(p for p in parts if p is not None)
        return total if total > 0 else None

    @property
    def hybrid(self) -> bool | None:
        """Whether the model has a recurrent-state pool: from the slot gauges' total; ``None`` when the build
        exports no slot gauges (SGLang before May 2026; /server_info's ``internal_states`` then tells)."""
        if self.state_slots_used is None or self.state_slots_available is None:
            return None
        return self.state_slots_total is not None


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates between two snapshots of the same server; ``None`` where not computable."""

    interval_s: float
    generation_tok_s: float | None
    prompt_tok_s: float | None
    requests_s: float | None
    decode_tok_s: float | None = None  # from the live decode counter (SGLang)
    prefill_tok_s: float | None = None
    preemptions_s: float | None = None


def _line_name(line: str) -> str:
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) > 2 else ""
    return line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""


def relevant_text(text: str) -> str:
    """The lines of an exposition text that belong to a family the name maps read."""
    return "".join(line + "\n" for line in text.splitlines() if _line_name(line) in _WANTED)


_LABELLED_NAMES = frozenset(spec[0] for m in LABELLED_MAPS.values() for spec in m.values())
# labels of a parallel group whose ranks repeat one scheduler's numbers: only rank 0 is read
_REPLICA_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank")


def _distinct(samples: list[Any]) -> list[Any]:
    """The samples of one family that count: rank 0 of replicated groups, the total of a priority split."""
    kept = [s for s in samples if all(s.labels.get(label, "0") == "0" for label in _REPLICA_LABELS)]
    if any(s.labels.get("priority") == "" for s in kept):
        kept = [s for s in kept if s.labels.get("priority", "") == ""]
    return kept


def _sample_values(text: str) -> dict[str, list[float]]:
    """Sample name -> values over the label sets that count (:func:`_distinct`). Raises ValueError on
    malformed exposition text.

    Samples of a labelled family are also filed under ``name|label=value`` for the labelled maps.
    """
    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(relevant_text(text)):
        for sample in _distinct(family.samples):
            value = float(sample.value)
            if not math.isnan(value):
                values.setdefault(sample.name, []).append(value)
                if sample.name in _LABELLED_NAMES:
                    for label, label_value in sample.labels.items():
                        values.setdefault(f"{sample.name}|{label}={label_value}", []).append(value)
    return values


def detect_engine(names: Mapping[str, object]) -> Engine:
    """The engine whose prefix most sample names carry; ``unknown`` when none does."""
    counts = {eng: sum(1 for n in names if n.startswith(prefix)) for eng, prefix in PREFIXES.items()}
    best = max(counts, key=lambda eng: counts[eng])
    return best if counts[best] else "unknown"


def parse_metrics(text: str, taken_at: float) -> ServerSnapshot:
    """Parse a ``/metrics`` body. Malformed text gives ``healthy=False`` with the parser's complaint."""
    try:
        values = _sample_values(text)
    except ValueError as exc:
        return ServerSnapshot(engine="unknown", taken_at=taken_at, healthy=False, error=f"unparseable /metrics: {exc}")
    engine = detect_engine(values)
    found: dict[str, float] = {}
    for name_field, name in NAME_MAPS.get(engine, {}).items():
        series = values.get(name)
        if series:
            found[name_field] = max(series) if name_field in _MAX_FIELDS else math.fsum(series)
    for name_field, (name, label, label_value) in LABELLED_MAPS.get(engine, {}).items():
        series = values.get(f"{name}|{label}={label_value}")
        if series:
            found[name_field] = math.fsum(series)
    if engine == "unknown":
        return ServerSnapshot(
            engine=engine,
            taken_at=taken_at,
            healthy=True,
            error="no sglang: or vllm: metrics in /metrics (start SGLang with --enable-metrics)",
        )
    return ServerSnapshot(
        engine=engine,
        taken_at=taken_at,
        healthy=True,
        running=found.get("running"),
        queued=found.get("queued"),
        kv_usage=found.get("kv_usage"),
        state_usage=found.get("state_usage"),
        generation_tokens_total=found.get("generation_tokens_total"),
        prompt_tokens_total=found.get("prompt_tokens_total"),
        requests_total=found.get("requests_total"),
        gen_throughput=found.get("gen_throughput"),
        preemptions_total=found.get("preemptions_total"),
        full_kv_usage=found.get("full_kv_usage"),
        cache_hit_rate=found.get("cache_hit_rate"),
        kv_tokens_capacity=found.get("kv_tokens_capacity"),
        sum_seq_lens=found.get("sum_seq_lens"),
        state_slots_used=found.get("state_slots_used"),
        state_slots_available=found.get("state_slots_available"),
        state_slots_evictable=found.get("state_slots_evictable"),
        aborted_total=found.get("aborted_total"),
        decode_tokens_total=found.get("decode_tokens_total"),
        prefill_tokens_total=found.get("prefill_tokens_total"),
        prefill_cache_tokens_total=found.get("prefill_cache_tokens_total"),
    )


def max_running_from_server_info(info: Mapping[str, Any]) -> int | None:
    """SGLang's effective request capacity: summed over DP ranks, else the launch flag if it was set."""
    states = info.get("internal_states")
    if isinstance(states, list):
        per_rank = [s.get("effective_max_running_requests_per_dp") for s in states if isinstance(s, dict)]
        ints = [v for v in per_rank if isinstance(v, int) and not isinstance(v, bool)]
        if ints:
            return sum(ints)
    flag = info.get("max_running_requests")
    return flag if isinstance(flag, int) and not isinstance(flag, bool) else None


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as resp:
        return resp.status, await resp.text()


async def _server_info(session: aiohttp.ClientSession, base_url: str) -> int | None:
    """``max_running`` from ``/server_info``; ``None`` when the route is missing or fails."""
    try:
        async with session.get(f"{base_url}/server_info") as resp:
            if resp.status != 200:
                return None
            info = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):  # ValueError: a body that is not JSON
        return None
    return max_running_from_server_info(info) if isinstance(info, dict) else None


async def scrape(
    session: aiohttp.ClientSession,
    base_url: str,
    clock: Callable[[], float],
    *,
    max_running: int | None = None,
    server_info: bool = True,
) -> ServerSnapshot:
    """GET ``/metrics`` (and, for SGLang, ``/server_info``) from ``base_url``; never raises.

    Timeouts are the session's. ``/server_info`` is a heavy call: pass ``max_running`` from an earlier
    snapshot of the same server to skip it, or ``server_info=False`` when the caller reads it itself.
    """
    base_url = base_url.rstrip("/")
    taken_at = clock()
    try:
        status, text = await _get(session, f"{base_url}/metrics")
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        return ServerSnapshot(
            engine="unknown",
            taken_at=taken_at,
            healthy=False,
            error=f"cannot reach {base_url}/metrics: {reason} (is the server up?)",
            timed_out=isinstance(exc, TimeoutError),
        )
    if status != 200:
        hint = " (start SGLang with --enable-metrics)" if status == 404 else ""
        return ServerSnapshot(
            engine="unknown",
            taken_at=taken_at,
            healthy=False,
            error=f"GET {base_url}/metrics answered HTTP {status}{hint}",
        )
    snap = parse_metrics(text, taken_at)
    if snap.engine == "sglang":
        if max_running is None and server_info:
            max_running = await _server_info(session, base_url)
        return dataclasses.replace(snap, max_running=max_running)
    return snap


def _per_second(prev: float | None, cur: float | None, dt: float) -> float | None:
    if prev is None or cur is None or cur < prev:  # missing, or the counter restarted with the server
        return None
    return (cur - prev) / dt


def rates(prev: ServerSnapshot, cur: ServerSnapshot) -> Rates | None:
    """Counter rates from ``prev`` to ``cur``; ``None`` if no time passed between them."""
    dt = cur.taken_at - prev.taken_at
    if dt <= 0:
        return None
    return Rates(
        interval_s=dt,
        generation_tok_s=_per_second(prev.generation_tokens_total, cur.generation_tokens_total, dt),
        prompt_tok_s=_per_second(prev.prompt_tokens_total, cur.prompt_tokens_total, dt),
        requests_s=_per_second(prev.requests_total, cur.requests_total, dt),
        decode_tok_s=_per_second(prev.decode_tokens_total, cur.decode_tokens_total, dt),
        prefill_tok_s=_per_second(prev.prefill_tokens_total, cur.prefill_tokens_total, dt),
        preemptions_s=_per_second(prev.preemptions_total, cur.preemptions_total, dt),
    )
