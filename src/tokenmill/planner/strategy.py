"""SGLang's recurrent-state radix-cache strategy for a server of one release: what ``auto`` resolves to, whether
the overlap scheduler runs, the state slots a running request reserves (S), and what the release refuses.

From SGLang 0.5.23 ``arg_groups/overrides.py`` (``_mamba_radix_cache_resolution``), ``arg_groups/mamba_hook.py``
and ``mem_cache/kv_cache_configurator.py`` (``_calculate_mamba_ratio``, ``get_mamba_tracking_slots``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.errors import ConfigError
from tokenmill.planner.flags import EngineFlags, auto_prefers_extra_buffer, sglang_release, strategy_flag_for
from tokenmill.planner.models import ModelSpec

# SGLang constants (mem_cache/kv_cache_configurator.py, mem_cache/allocation_sizing.py;
# docs/reference/sglang.md §2.3)
RADIX_BASE_SLOTS = 3  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
PING_PONG_SLOTS_OVERLAP = 2  # get_mamba_tracking_slots: extra_buffer with the overlap scheduler
PING_PONG_SLOTS_NO_OVERLAP = 1  # extra_buffer without overlap (speculative decoding v1 turns overlap off)
PING_PONG_SLOTS_LAZY = 1  # extra_buffer_lazy: the second buffer is taken on demand


@dataclass(frozen=True, slots=True)
class StrategyChoice:
    """How SGLang will run the recurrent-state radix cache, and the slots it reserves per request (S)."""

    strategy: str  # no_buffer | extra_buffer | extra_buffer_lazy | radix off | n/a
    radix_cache: bool
    overlap: bool
    slots_per_request: int  # S; 0 for models without recurrent state
    notes: tuple[str, ...] = ()


def _radix_off_notes(flags: EngineFlags, version: str | None) -> list[str]:
    if flags.mamba_strategy not in ("extra_buffer", "extra_buffer_lazy"):
        return []
    if auto_prefers_extra_buffer(version):
        return [f"{flags.mamba_strategy} with --disable-radix-cache: SGLang {version or ''} ignores the strategy"]
    return [
        f"{flags.mamba_strategy} with --disable-radix-cache: SGLang {version} refuses this combination "
        "(drop the strategy flag or use no_buffer)"
    ]


def _resolve_auto(model: ModelSpec, flags: EngineFlags, version: str | None) -> str:
    """``auto`` as SGLang resolves it (0.5.23 ``arg_groups/overrides.py``: ``_mamba_radix_cache_resolution``).

    From 0.5.14: ``extra_buffer`` when the overlap scheduler is wanted or ``--page-size`` > 1 and the
    architecture supports it, else ``no_buffer``. Up to 0.5.13: ``no_buffer`` for every model.
    """
    if not auto_prefers_extra_buffer(version):
        return "no_buffer"
    wants_paging = (flags.page_size or 1) > 1
    if (not flags.disable_overlap_schedule or wants_paging) and model.supports_extra_buffer:
        return "extra_buffer"
    return "no_buffer"


def _no_buffer_notes(flags: EngineFlags, version: str | None, resolved_from_auto: bool) -> list[str]:
    """``no_buffer`` runs without the overlap scheduler and with page size 1; say when a launch is refused."""
    notes = []
    refuses = auto_prefers_extra_buffer(version) and not resolved_from_auto
    if not flags.disable_overlap_schedule:
        if refuses:
            notes.append(
                f"SGLang {version or 'from 0.5.14'} refuses no_buffer without --disable-overlap-schedule "
                "(an assertion at start-up): add it; planned with the overlap scheduler off"
            )
        else:
            notes.append("no_buffer with the radix cache turns the overlap scheduler off")
    if (flags.page_size or 1) > 1:
        if refuses:
            notes.append(f"SGLang {version or 'from 0.5.14'} refuses no_buffer with --page-size > 1; planned with 1")
        else:
            notes.append("no_buffer with the radix cache forces --page-size 1")
    return notes


def resolve_strategy(model: ModelSpec, flags: EngineFlags, version: str | None) -> StrategyChoice:
    """Resolve ``auto``, the overlap scheduler and S for a server of SGLang ``version``
    (``_calculate_mamba_ratio`` in ``mem_cache/kv_cache_configurator.py``;
    docs/reference/sglang.md §1.2, §2.3)."""
    radix = not flags.disable_radix_cache
    overlap = not flags.disable_overlap_schedule
    notes: list[str] = []
    if not model.is_hybrid:
        return StrategyChoice("n/a", radix, overlap, 0)
    if not radix:
        return StrategyChoice("radix off", False, overlap, 1, tuple(_radix_off_notes(flags, version)))
    strategy: str = flags.mamba_strategy
    from_auto = strategy == "auto"
    if from_auto:
        strategy = _resolve_auto(model, flags, version)
        notes.append(f"{strategy_flag_for(version)} auto resolved to {strategy} (SGLang {version or 'newest'})")
    if strategy in ("extra_buffer", "extra_buffer_lazy") and not model.supports_extra_buffer:
        raise ConfigError(f"{model.name} ({model.model_type}) does not support {strategy}; use no_buffer")
    base = RADIX_BASE_SLOTS
    if strategy == "no_buffer":
        notes += _no_buffer_notes(flags, version, from_auto)
        return StrategyChoice("no_buffer", True, False, base, tuple(notes))
    if flags.skip_decode_lock:
        base -= 1
    if flags.speculative_algorithm:
        extra = PING_PONG_SLOTS_NO_OVERLAP
    elif strategy == "extra_buffer_lazy":
        extra = PING_PONG_SLOTS_LAZY
        if sglang_release(version) is not None and not auto_prefers_extra_buffer(version):
            notes.append(f"extra_buffer_lazy needs an SGLang build with PR #27118 (not {version})")
    else:
        extra = PING_PONG_SLOTS_OVERLAP if overlap else PING_PONG_SLOTS_NO_OVERLAP
    return StrategyChoice(strategy, True, overlap, base + extra, tuple(notes))
