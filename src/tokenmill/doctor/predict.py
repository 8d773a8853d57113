"""Predicted gains: the capacity planner run on a server's flags before and after a recommended change.

This is the doctor's one seam to the planner. :class:`PlannerPredictor` needs the model (a bundled name or a
config.json; by default the server's ``model_path``) and the GPU (given, or told by the simulated twin). It plans
the requests the client sends: their mean lengths so far, and their ``max_tokens`` and ``ignore_eos`` when the
client says (:class:`~tokenmill.doctor.model.ClientObs`), since SGLang admits each kind by its own rule
(:mod:`tokenmill.planner.admission`; what a server is planned with: :mod:`tokenmill.doctor.setting`). What the
planner refuses (an unknown model or GPU, flags that do not fit: its ``ConfigError``) gives no prediction rather than
an error: the verdict still stands on the observed numbers (:mod:`tokenmill.doctor.observed`). Any other error is a
bug in the planner: it is logged with its traceback (and gives no prediction either, so a long run goes on).
:meth:`PlannerPredictor.today` is the planner's picture of a server as it runs now
(its cap, rate, the side of the roofline its decode step is on, the share of its time spent prefilling),
which the rules read to name what binds.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from tokenmill.config import PlannerSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import (
    Candidate,
    ClientObs,
    MemoryLevel,
    MemoryRisk,
    PlanPoint,
    Prediction,
    ServerObs,
)
from tokenmill.doctor.setting import (
    DEFAULT_INPUT_LEN,
    DEFAULT_OUTPUT_LEN,
    STEADY_PROMPTS,
    PlanSetting,
    length_sigma,
    or_none,
    per_request,
    two_digits,
)
from tokenmill.errors import DoesNotFitError

if TYPE_CHECKING:
    from tokenmill.planner.capacity import ServerCapacity
    from tokenmill.planner.hardware import GpuSpec
    from tokenmill.planner.models import ModelSpec
    from tokenmill.planner.plan import PlanResult

# the roofline's ceiling: every byte at the GPU's peak bandwidth, every FLOP at its peak, no fixed cost a step
IDEAL = {"eta_bw": 1.0, "eta_request_ratio": 1.0, "eta_compute": 1.0, "t_fixed_ms": 0.0, "t_fixed_no_overlap_ms": 0.0}


@dataclass(frozen=True, slots=True)
class Expected:
    """The planner's rate for one server as it runs (its flags, GPU, the workload so far) and the roofline's
    ceiling for the same: output tok/s of the whole server (every GPU of it) on the GPU's own clock."""

    gpu: str
    tok_s: float
    ceiling_tok_s: float
    eta_bw: float  # the bandwidth efficiency the expectation assumes


class Predictor(Protocol):
    def __call__(self, obs: ServerObs, client: ClientObs, candidate: Candidate) -> Prediction | None: ...

    def today(self, obs: ServerObs, client: ClientObs) -> PlanPoint | None: ...


CACHE_ENTRIES = 1024  # a long run's workload drifts: the caches start afresh rather than grow


def _bound(cache: MutableMapping[tuple[object, ...], Any]) -> None:
    if len(cache) >= CACHE_ENTRIES:
        cache.clear()


class PlannerPredictor:
    """Predictions from :mod:`tokenmill.planner`; results are cached per (model, GPU, flags, workload)."""

    def __init__(
        self,
        model: str | None = None,
        gpu: str | None = None,
        config: PlannerSpec | None = None,
        gpu_file: str | None = None,
    ):
        self.model = model
        self.gpu = gpu
        self.config = config
        self.gpu_file = gpu_file  # GPUs beyond the bundled ones (tokenmill plan --gpu-file)
        self._specs: dict[str, ModelSpec | None] = {}
        self._gpus: dict[str, GpuSpec | None] = {}
        self._cache: dict[tuple[object, ...], Prediction | None] = {}
        self._today: dict[tuple[object, ...], PlanPoint | None] = {}
        self._expected: dict[tuple[object, ...], Expected | None] = {}

    def _model(self, name: str) -> ModelSpec | None:
        if name not in self._specs:
            from tokenmill.planner.catalog import load_model

            self._specs[name] = or_none(f"no predictions for model {name!r}", lambda: load_model(name))
        return self._specs[name]

    def _gpu(self, name: str) -> GpuSpec | None:
        if name not in self._gpus:
            from tokenmill.planner.hardware import GpuCatalog

            self._gpus[name] = or_none(
                f"no predictions for GPU {name!r}", lambda: GpuCatalog.load(self.gpu_file).get(name)
            )
        return self._gpus[name]

    def _setting(self, obs: ServerObs, client: ClientObs) -> PlanSetting | None:
        """The model, GPU, workload and release to plan ``obs`` with; None when the planner cannot."""
        info = obs.view.info
        model_name = self.model or (info.model_path if info else None)
        gpu_name = self.gpu or (info.gpu if info else None)
        if not model_name or not gpu_name:
            return None
        model, gpu = self._model(model_name), self._gpu(gpu_name)
        if model is None or gpu is None:
            return None
        v = obs.view
        inp = two_digits(client.avg_prompt_tokens or per_request(v.prompt_tok_s, v.requests_s) or DEFAULT_INPUT_LEN)
        out = two_digits(client.avg_output_tokens or per_request(v.decode_tok_s, v.requests_s) or DEFAULT_OUTPUT_LEN)
        version = info.version if info else None
        kind = (client.max_tokens, client.ignore_eos)
        config = self._config(version)
        return PlanSetting(model_name, gpu_name, model, gpu, inp, out, *kind, version, config, length_sigma(client))

    def __call__(self, obs: ServerObs, client: ClientObs, candidate: Candidate) -> Prediction | None:
        setting = self._setting(obs, client)
        if setting is None or not candidate.flags_after:
            return None
        before = advice.current_flags(obs)
        key = (setting.key, tuple(before), candidate.flags_after, candidate.running_before, candidate.max_tokens)
        if key not in self._cache:
            _bound(self._cache)
            self._cache[key] = self._predict(setting, before, candidate, obs.view.max_running)
        return self._cache[key]

    def today(self, obs: ServerObs, client: ClientObs) -> PlanPoint | None:
        """Today's server as the planner sees it, at the running count observed (when it runs any)."""
        setting = self._setting(obs, client)
        if setting is None:
            return None
        v = obs.view
        running = v.running_peak if v.running_peak is not None else v.running
        observed = max(0, round(running or 0))
        ctx = v.avg_context or setting.workload().avg_context
        key = (setting.key, tuple(advice.current_flags(obs)), observed, round(ctx, -1))
        if key not in self._today:
            _bound(self._today)
            self._today[key] = self._picture(setting, advice.current_flags(obs), observed, ctx)
        return self._today[key]

    def _picture(self, s: PlanSetting, flags: list[str], running: int, ctx: float) -> PlanPoint | None:
        result = or_none("no plan of today's server", lambda: s.plan(flags))
        if result is None:
            return None
        cap = result.capacity
        n = min(running, cap.max_running) if running else result.running
        st = cap.step(n, round(n * ctx))
        # the share of the GPU's time prefilling: SGLang prefills each request once, then decodes it in batch
        prefill = result.prefill_s_per_request * st.tokens_per_s / result.workload.output_len
        return PlanPoint(
            cap.max_running,
            result.tok_s_per_gpu,
            result.binding,
            bound=st.bound,
            prefill_share=prefill / (1 + prefill),
        )

    def expected(self, obs: ServerObs, client: ClientObs) -> Expected | None:
        """What the planner expects of this server (its flags, GPU and the workload so far) and the roofline's
        ceiling for the same, in output tok/s of the whole server on the GPU's clock; None when it cannot say."""
        setting = self._setting(obs, client)
        if setting is None:
            return None
        flags = advice.current_flags(obs)
        key = (setting.key, tuple(flags))
        if key not in self._expected:
            _bound(self._expected)
            self._expected[key] = self._expect(setting, flags)
        return self._expected[key]

    def capacity(self, obs: ServerObs, client: ClientObs) -> ServerCapacity | None:
        """The planner's capacity of this server as it runs (its pools and step roofline), for fitting eta to its
        own decode samples; None when the planner cannot plan it."""
        setting = self._setting(obs, client)
        if setting is None:
            return None
        flags = advice.current_flags(obs)
        result = or_none("no capacity to fit eta with", lambda: setting.plan(flags))
        return result.capacity if result is not None else None

    def rate_at(self, obs: ServerObs, client: ClientObs, eta_bw: float) -> float | None:
        """The planner's output tok/s of this server as it runs (on the GPU's clock) at bandwidth efficiency
        ``eta_bw``, with at most the client's in-flight limit running; None without an answer's length to plan
        with or a plan of the server."""
        from tokenmill.planner.plan import operating_point
        from tokenmill.planner.workload import request_workload

        out = client.avg_output_tokens
        cap = self.capacity(obs, client) if out else None
        if cap is None or out is None:
            return None
        cap = replace(cap, roofline=replace(cap.roofline, eta_bw=eta_bw))
        inp = client.avg_prompt_tokens or DEFAULT_INPUT_LEN
        feed = obs.client.limit if obs.client.limit and obs.client.limit > 0 else STEADY_PROMPTS
        work = request_workload(
            feed, inp, out, client.max_tokens, client.ignore_eos, "doctor", output_sigma=length_sigma(client)
        )
        try:
            return operating_point(cap, work, 1, self.config or PlannerSpec()).output_tok_s
        except DoesNotFitError:
            return None

    def _expect(self, s: PlanSetting, flags: list[str]) -> Expected | None:
        ideal = s.config.model_copy(update=IDEAL)
        pair = or_none(
            "no expected rate",
            lambda: (s.plan(flags), s.plan(flags, ideal)),
        )
        if pair is None:
            return None
        result, ceiling = pair
        return Expected(s.gpu.key, result.output_tok_s, ceiling.output_tok_s, result.capacity.roofline.eta_bw)

    def _config(self, version: str | None) -> PlannerSpec:
        """The planner's assumptions for a server of ``version`` (what ``auto`` resolves to, which spellings)."""
        from tokenmill.planner.flags import sglang_release

        config = self.config or PlannerSpec()
        if sglang_release(version) is None:
            return config  # not an SGLang release number: the planner's own
        return config.model_copy(update={"sglang_version": version})

    @staticmethod
    def _radix_off_cap(s: PlanSetting, cand: Candidate) -> Candidate:
        """With the radix cache off, the planner's cap that fills memory exactly (for the client's requests, as
        SGLang admits their kind) replaces the observed guess."""
        flags = list(cand.flags_after)
        if not cand.fill_memory or "--disable-radix-cache" not in flags or "--max-running-requests" not in flags:
            return cand  # only a radix-off cap is sized to memory; other changes keep today's flags
        from tokenmill.planner.flags import parse_flags
        from tokenmill.planner.whatif import best_radix_off_running

        engine = parse_flags(flags).with_(max_running_requests=None)
        n = best_radix_off_running(s.model, s.gpu, engine, s.workload(), 1, s.config)
        old = flags[flags.index("--max-running-requests") + 1]
        change = cand.change.replace(f"--max-running-requests {old}", f"--max-running-requests {n}")
        after = advice.set_flag(flags, "--max-running-requests", str(n))
        return replace(cand, change=change, flags_after=tuple(after), est_max_running=n)

    def _predict(
        self, setting: PlanSetting, before: list[str], cand: Candidate, observed_cap: int | None
    ) -> Prediction | None:
        planned = or_none(f"no prediction for {cand.change}", lambda: self._before_after(setting, before, cand))
        if planned is None:
            return None
        cand, b, a = planned
        memory = self._memory_risk(setting, cand.change, b, a)
        if cand.running_before is not None:
            return Prediction(
                cand.change,
                PlanPoint(b.running, b.tok_s_per_gpu, b.binding),
                PlanPoint(a.running, a.tok_s_per_gpu, a.binding),
                "planner",
                what="running",
                memory=memory,
            )
        return Prediction(
            cand.change,
            PlanPoint(b.capacity.max_running, b.tok_s_per_gpu, b.binding),
            PlanPoint(a.capacity.max_running, a.tok_s_per_gpu, a.binding),
            "planner",
            note=self._mismatch(observed_cap, b.capacity.max_running),
            memory=memory,
        )

    @staticmethod
    def _memory_risk(s: PlanSetting, change: str, b: PlanResult, a: PlanResult) -> MemoryRisk | None:
        """For a change that touches memory (or moves the line between the pools and the rest): what it leaves
        outside the static pools against SGLang's own reserve estimate (``PlannerSpec.oom_risk_high``)."""
        before, after = b.capacity.pools, a.capacity.pools
        moved = (
            abs(after.headroom_gib - before.headroom_gib) >= 0.05 or abs(after.reserve_gib - before.reserve_gib) >= 0.05
        )
        if not moved and not advice.touches_memory(change):
            return None
        share = after.headroom_gib / after.reserve_gib if after.reserve_gib > 0 else 1.0
        level: MemoryLevel = "low" if share >= 1 else "moderate" if share >= s.config.oom_risk_high else "high"
        return MemoryRisk(level, before.headroom_gib, after.headroom_gib, after.reserve_gib)

    def _before_after(
        self, setting: PlanSetting, before: list[str], cand: Candidate
    ) -> tuple[Candidate, PlanResult, PlanResult]:
        """The candidate (its radix-off cap sized to memory) and the plans of today's flags and of the change."""
        cand = self._radix_off_cap(setting, cand)
        if cand.running_before is not None:
            before = advice.set_flag(before, "--max-running-requests", str(max(1, cand.running_before)))
        b = setting.plan(before)
        after = setting if cand.max_tokens is None else replace(setting, max_tokens=cand.max_tokens)
        a = after.plan(list(cand.flags_after))
        return cand, b, a

    @staticmethod
    def _mismatch(observed: int | None, planned: int) -> str | None:
        """Say so when the planner's picture of today's server is off (wrong GPU or model given?)."""
        if observed and abs(planned - observed) > 0.25 * observed:
            return f"the planner puts today's cap at {planned}, the server reports {observed}: check --gpu / --model"
        return None
