"""``tokenmill doctor`` as a library call: one look at the servers, the verdicts, and each server set against its
hardware (the planner's expected rate, the roofline's ceiling, another GPU's plan)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenmill.config import DoctorSpec
from tokenmill.doctor.engine import diagnose
from tokenmill.doctor.model import Observation, Verdict
from tokenmill.doctor.oneshot import Settling, observe
from tokenmill.doctor.predict import PlannerPredictor


@dataclass(frozen=True, slots=True)
class Planning:
    """What the planner predicts for: the model and GPU (None: the servers' own, when they say), and another
    GPU to compare with; ``gpu_file`` adds GPUs to the bundled ones; the requests' ``max_tokens`` and
    ``ignore_eos`` when given (else what the run in progress says, else ordinary requests of the mean length)."""

    model: str | None = None
    gpu: str | None = None
    compare_gpu: str | None = None
    gpu_file: str | None = None
    max_tokens: int | None = None
    ignore_eos: bool | None = None
    train_max_length: int | None = None  # the drafter trainer's maximum sequence length (prompt + answer)

    def requests(self, obs: Observation) -> Observation:
        """``obs`` with the client's requests of the kind given here."""
        client = obs.client
        if self.max_tokens is not None:
            client = replace(client, max_tokens=self.max_tokens)
        if self.ignore_eos is not None:
            client = replace(client, ignore_eos=self.ignore_eos)
        if self.train_max_length is not None:
            client = replace(client, train_max_length=self.train_max_length)
        return replace(obs, client=client)

    def check(self) -> None:
        """Refuse an unknown model or GPU now: it would only mean silently missing predictions."""
        from tokenmill.planner.catalog import load_model
        from tokenmill.planner.hardware import GpuCatalog

        names = [n for n in (self.gpu, self.compare_gpu) if n]
        if names:
            catalog = GpuCatalog.load(self.gpu_file)
            for name in names:
                catalog.get(name)
        if self.model:
            load_model(self.model)

    def predictor(self, gpu: str | None) -> PlannerPredictor:
        return PlannerPredictor(self.model, gpu, gpu_file=self.gpu_file)


def oneshot_spec(samples: int | None, interval_s: float | None, max_s: float | None) -> DoctorSpec:
    """The doctor's settings for one look: a server that never answered is down; the sampling as given, else the
    defaults."""
    spec = DoctorSpec()
    return spec.model_copy(
        update={
            "down_after_s": 0.0,
            "oneshot_samples": samples or spec.oneshot_samples,
            "oneshot_interval_s": interval_s or spec.oneshot_interval_s,
            "oneshot_max_s": max_s or spec.oneshot_max_s,
        }
    )


@dataclass(frozen=True, slots=True)
class Checkup:
    """What one look found."""

    obs: Observation
    settling: Settling
    verdicts: list[Verdict]
    vs_hardware: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` body."""
        sampling = {"text": self.settling.text(), "settled": self.settling.settled(), "spread": self.settling.spread()}
        return {"sampling": sampling, "verdicts": [v.as_dict() for v in self.verdicts], "vs_hardware": self.vs_hardware}


async def checkup(
    urls: Sequence[str],
    spec: DoctorSpec,
    planning: Planning,
    *,
    headers: Mapping[str, str] | None = None,
    concurrency: int | None = None,
    out: Path | None = None,
) -> Checkup:
    """Scrape ``urls`` until their rates settle (with the run's side from ``out`` when given), diagnose them and
    set each against its hardware."""
    planning.check()
    obs, settling = await observe(urls, spec, headers=headers, concurrency=concurrency, out=out)
    obs = planning.requests(obs)
    predictor = planning.predictor(planning.gpu)
    compare = planning.predictor(planning.compare_gpu) if planning.compare_gpu else None
    return Checkup(obs, settling, diagnose(obs, spec, predictor), vs_hardware(obs, predictor, compare))


def vs_hardware(
    obs: Observation, predictor: PlannerPredictor, compare: PlannerPredictor | None
) -> list[dict[str, Any]]:
    """Each healthy server's decode rate against the planner's expected rate, the roofline's ceiling and, with
    ``compare``, the same workload planned on that GPU (all on the GPU's clock: a twin's time scale taken out)."""
    rows: list[dict[str, Any]] = []
    for server in obs.servers:
        v = server.view
        if not v.healthy or not v.decode_tok_s:
            continue
        exp = predictor.expected(server, obs.client)
        if exp is None:
            continue
        scale = v.info.time_scale if v.info is not None and v.info.time_scale else 1.0
        measured = v.decode_tok_s * scale
        row = {
            "server": v.url,
            "gpu": exp.gpu,
            "decode_tok_s": round(measured, 1),
            "expected_tok_s": round(exp.tok_s, 1),
            "expected_share": round(measured / exp.tok_s, 4) if exp.tok_s else None,
            "ceiling_tok_s": round(exp.ceiling_tok_s, 1),
            "ceiling_share": round(measured / exp.ceiling_tok_s, 4) if exp.ceiling_tok_s else None,
        }
        other = compare.expected(server, obs.client) if compare is not None else None
        if other is not None and other.tok_s:
            row.update(
                compare_gpu=other.gpu,
                compare_tok_s=round(other.tok_s, 1),
                compare_share=round(measured / other.tok_s, 4),
            )
        rows.append(row)
    return rows
