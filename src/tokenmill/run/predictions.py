"""The planner's predictions for one job's requests: the doctor's planner, planned with the job's request kind.

SGLang admits an ``ignore_eos`` request only while every running one's prompt and whole (clipped) limit fit, and
an ordinary one against its limit times the settled new-token ratio (:mod:`tokenmill.planner.admission`), so the
running count a server settles at, and every rate the planner expects of it, depends on what the job sends:
``sampling.max_tokens`` and ``ignore_eos``. :class:`JobPredictor` is the doctor's
:class:`~tokenmill.doctor.predict.PlannerPredictor` whose plans carry them; a run's doctor, its expected rates and
autotune's proposals all read it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tokenmill.config import PlannerConfig
from tokenmill.doctor.model import ClientObs, ServerObs
from tokenmill.doctor.predict import DEFAULT_INPUT_LEN, STEADY_PROMPTS, PlannerPredictor
from tokenmill.errors import DoesNotFitError
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuSpec
from tokenmill.planner.models import ModelSpec
from tokenmill.planner.plan import PlanResult, Workload, operating_point, plan


def job_workload(
    input_len: float, output_len: float, max_tokens: int | None, ignore_eos: bool, prompts: int = STEADY_PROMPTS
) -> Workload:
    """The workload of a job's requests: its mean lengths, its limit and its kind (an ``ignore_eos`` answer runs to
    the limit, whatever the mean so far says); ``prompts`` bounds how many run at once (by default nothing does)."""
    if max_tokens is None:
        return Workload(prompts, input_len, output_len, source="doctor", ignore_eos=ignore_eos)
    if ignore_eos:
        return Workload(prompts, input_len, max_tokens, "doctor", max_tokens=max_tokens, ignore_eos=True)
    limit = max(max_tokens, math.ceil(output_len))
    return Workload(prompts, input_len, output_len, source="doctor", max_tokens=limit)


class JobPredictor(PlannerPredictor):
    """:class:`PlannerPredictor` for the requests of one job (``max_tokens``, ``ignore_eos``)."""

    def __init__(
        self,
        model: str | None = None,
        gpu: str | None = None,
        config: PlannerConfig | None = None,
        gpu_file: str | None = None,
        *,
        max_tokens: int | None = None,
        ignore_eos: bool = False,
    ) -> None:
        super().__init__(model, gpu, config, gpu_file)
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos

    def _plan(  # type: ignore[override]  # the base plans ordinary requests of the mean length; this the job's
        self, model: ModelSpec, gpu: GpuSpec, flags: list[str], inp: float, out: float, config: PlannerConfig
    ) -> PlanResult:
        engine = parse_flags(flags)
        workload = job_workload(inp, out, self.max_tokens, self.ignore_eos)
        return plan(model, gpu, engine, workload, config, gpu_count=engine.tp_size)

    def rate_at(self, obs: ServerObs, client: ClientObs, eta_bw: float) -> float | None:
        """The planner's output tok/s of this server as it runs (on the GPU's clock) at bandwidth efficiency
        ``eta_bw``, with at most the client's in-flight limit running; None without an answer's length to plan
        with or a plan of the server."""
        out = client.avg_output_tokens
        cap = self.capacity(obs, client) if out else None
        if cap is None or out is None:
            return None
        cap = replace(cap, roofline=replace(cap.roofline, eta_bw=eta_bw))
        inp = client.avg_prompt_tokens or DEFAULT_INPUT_LEN
        feed = obs.client.limit if obs.client.limit and obs.client.limit > 0 else STEADY_PROMPTS
        work = job_workload(inp, out, self.max_tokens, self.ignore_eos, prompts=feed)
        try:
            return operating_point(cap, work, 1, self.config or PlannerConfig()).output_tok_s
        except DoesNotFitError:
            return None
