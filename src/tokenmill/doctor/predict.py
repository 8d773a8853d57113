"""Predicted gains: the capacity planner run on a server's flags before and after a recommended change.

This is the doctor's one seam to the planner. :class:`PlannerPredictor` needs the model (a bundled name
or a config.json; by default the server's ``model_path``) and the GPU (given, or told by the simulated
twin). Anything it cannot resolve gives no prediction rather than an error: the verdict still stands on
the observed numbers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from tokenmill.doctor import advice
from tokenmill.doctor.model import Candidate, ClientObs, PlanPoint, Prediction, ServerObs

if TYPE_CHECKING:
    from tokenmill.config import PlannerConfig
    from tokenmill.planner.hardware import GpuSpec
    from tokenmill.planner.models import ModelSpec
    from tokenmill.planner.plan import PlanResult

log = logging.getLogger("tokenmill.doctor")

STEADY_PROMPTS = 1_000_000  # the prompt count never binds a steady-state prediction
DEFAULT_INPUT_LEN = 1024.0
DEFAULT_OUTPUT_LEN = 1024.0


class Predictor(Protocol):
    def __call__(self, obs: ServerObs, client: ClientObs, candidate: Candidate) -> Prediction | None: ...


def _per_request(tokens_s: float | None, requests_s: float | None) -> float | None:
    """Mean tokens per finished request from the server's own counters."""
    return tokens_s / requests_s if tokens_s and requests_s else None


def _two_digits(x: float) -> float:
    return float(f"{x:.2g}")


class PlannerPredictor:
    """Predictions from :mod:`tokenmill.planner`; results are cached per (model, GPU, flags, workload)."""

    def __init__(self, model: str | None = None, gpu: str | None = None, config: PlannerConfig | None = None):
        self.model = model
        self.gpu = gpu
        self.config = config
        self._specs: dict[str, ModelSpec | None] = {}
        self._gpus: dict[str, GpuSpec | None] = {}
        self._cache: dict[tuple[object, ...], Prediction | None] = {}

    def _model(self, name: str) -> ModelSpec | None:
        if name not in self._specs:
            try:
                from tokenmill.planner.catalog import load_model

                self._specs[name] = load_model(name)
            except Exception as exc:  # an unknown model only means no prediction
                log.info("no predictions for model %r: %s", name, exc)
                self._specs[name] = None
        return self._specs[name]

    def _gpu(self, name: str) -> GpuSpec | None:
        if name not in self._gpus:
            try:
                from tokenmill.planner.hardware import GpuCatalog

                self._gpus[name] = GpuCatalog.load().get(name)
            except Exception as exc:
                log.info("no predictions for GPU %r: %s", name, exc)
                self._gpus[name] = None
        return self._gpus[name]

    def __call__(self, obs: ServerObs, client: ClientObs, candidate: Candidate) -> Prediction | None:
        info = obs.view.info
        model_name = self.model or (info.model_path if info else None)
        gpu_name = self.gpu or (info.gpu if info else None)
        if not candidate.flags_after or not model_name or not gpu_name:
            return None
        model, gpu = self._model(model_name), self._gpu(gpu_name)
        if model is None or gpu is None:
            return None
        v = obs.view
        inp = _two_digits(client.avg_prompt_tokens or _per_request(v.prompt_tok_s, v.requests_s) or DEFAULT_INPUT_LEN)
        out = _two_digits(client.avg_output_tokens or _per_request(v.decode_tok_s, v.requests_s) or DEFAULT_OUTPUT_LEN)
        before = advice.current_flags(obs)
        version = info.version if info else None
        key = (model_name, gpu_name, tuple(before), candidate.flags_after, candidate.running_before, inp, out, version)
        if key not in self._cache:
            config = self._config(version)
            self._cache[key] = self._predict(model, gpu, before, candidate, inp, out, obs.view.max_running, config)
        return self._cache[key]

    def _config(self, version: str | None) -> PlannerConfig:
        """The planner's assumptions for a server of ``version`` (what ``auto`` resolves to, which spellings)."""
        from tokenmill.config import PlannerConfig
        from tokenmill.planner.flags import sglang_release

        config = self.config or PlannerConfig()
        if sglang_release(version) is None:
            return config  # not an SGLang release number: the planner's own
        return config.model_copy(update={"sglang_version": version})

    def _radix_off_cap(
        self, model: ModelSpec, gpu: GpuSpec, cand: Candidate, inp: float, out: float, config: PlannerConfig
    ) -> Candidate:
        """With the radix cache off, the planner's cap that fills memory exactly replaces the observed guess."""
        flags = list(cand.flags_after)
        if "--disable-radix-cache" not in cand.change or "--max-running-requests" not in flags:
            return cand  # only the radix-off recommendation sizes its cap; other changes keep today's flags
        from tokenmill.planner.flags import parse_flags
        from tokenmill.planner.plan import Workload, best_radix_off_running

        engine = parse_flags(flags).with_(max_running_requests=None)
        workload = Workload(prompts=STEADY_PROMPTS, input_len=inp, output_len=out, source="doctor")
        n = best_radix_off_running(model, gpu, engine, workload, 1, config)
        old = flags[flags.index("--max-running-requests") + 1]
        change = cand.change.replace(f"--max-running-requests {old}", f"--max-running-requests {n}")
        after = advice.set_flag(flags, "--max-running-requests", str(n))
        return Candidate(change, tuple(after), n, cand.note, cand.running_before)

    def _predict(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        before: list[str],
        cand: Candidate,
        inp: float,
        out: float,
        observed_cap: int | None,
        config: PlannerConfig,
    ) -> Prediction | None:
        try:
            cand = self._radix_off_cap(model, gpu, cand, inp, out, config)
            if cand.running_before is not None:
                before = advice.set_flag(before, "--max-running-requests", str(max(1, cand.running_before)))
            b = self._plan(model, gpu, before, inp, out, config)
            a = self._plan(model, gpu, list(cand.flags_after), inp, out, config)
        except Exception as exc:  # the planner refusing a configuration means: no numbers for it
            log.info("no prediction for %s: %s", cand.change, exc)
            return None
        if cand.running_before is not None:
            return Prediction(
                cand.change,
                PlanPoint(b.running, b.tok_s_per_gpu, b.binding),
                PlanPoint(a.running, a.tok_s_per_gpu, a.binding),
                "planner",
                what="running",
            )
        return Prediction(
            cand.change,
            PlanPoint(b.capacity.max_running, b.tok_s_per_gpu, b.binding),
            PlanPoint(a.capacity.max_running, a.tok_s_per_gpu, a.binding),
            "planner",
            note=self._mismatch(observed_cap, b.capacity.max_running),
        )

    @staticmethod
    def _mismatch(observed: int | None, planned: int) -> str | None:
        """Say so when the planner's picture of today's server is off (wrong GPU or model given?)."""
        if observed and abs(planned - observed) > 0.25 * observed:
            return f"the planner puts today's cap at {planned}, the server reports {observed}: check --gpu / --model"
        return None

    @staticmethod
    def _plan(
        model: ModelSpec, gpu: GpuSpec, flags: list[str], inp: float, out: float, config: PlannerConfig
    ) -> PlanResult:
        from tokenmill.planner.flags import parse_flags
        from tokenmill.planner.plan import Workload, plan

        engine = parse_flags(flags)
        workload = Workload(prompts=STEADY_PROMPTS, input_len=inp, output_len=out, source="doctor")
        return plan(model, gpu, engine, workload, config, gpu_count=engine.tp_size)


def observed_prediction(obs: ServerObs, candidate: Candidate) -> Prediction | None:
    """Max running before/after from the observed numbers alone (no throughput)."""
    if candidate.est_max_running is None:
        return None
    v = obs.view
    if candidate.running_before is not None:
        before = candidate.running_before
        return Prediction(
            candidate.change, PlanPoint(before), PlanPoint(candidate.est_max_running), "observed", what="running"
        )
    if not v.max_running:
        return None
    return Prediction(candidate.change, PlanPoint(v.max_running), PlanPoint(candidate.est_max_running), "observed")
