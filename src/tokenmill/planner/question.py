"""``tokenmill plan`` as a library call: the question (model, GPU, flags, workload) in, the plan and its what-ifs,
comparisons and training cut out; the workload measured on a dataset when one is given, of the request kind
given (``max_tokens``, ``ignore_eos``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenmill.config import InputSpec, PlannerSpec
from tokenmill.errors import ConfigError, DoesNotFitError
from tokenmill.planner.catalog import load_model
from tokenmill.planner.flags import parse_flags
from tokenmill.planner.hardware import GpuCatalog, GpuSpec
from tokenmill.planner.plan import TrainCut, Workload, compare, train_cut
from tokenmill.planner.plan import plan as make_plan
from tokenmill.planner.report import PlanReport
from tokenmill.planner.ssm import ssm_assumption
from tokenmill.planner.whatif import WhatIfRow, what_if


@dataclass(frozen=True, slots=True)
class WorkloadQuestion:
    """The workload as given: counts and lengths (None: measured on ``dataset``, else the planner's defaults), and
    the requests' kind: their ``max_tokens`` (None: the mean output) and whether they send ``ignore_eos`` (every
    answer then runs to ``max_tokens``)."""

    prompts: int | None = None
    input_len: float | None = None
    output_len: float | None = None
    dataset: str | InputSpec | None = None  # an input (a path, or a job's) to measure prompt lengths and count on
    tokenizer: str | None = None  # for measuring ``dataset`` (otherwise characters per token are assumed)
    sample_rows: int | None = None  # rows of ``dataset`` measured (None: PlannerSpec.dataset_sample_rows)
    max_tokens: int | None = None
    ignore_eos: bool = False
    answers_per_row: int = 1  # requests per row of ``dataset`` (a job's ``samples``)

    def _output(self, config: PlannerSpec, sources: list[str]) -> float:
        """The mean output: given; with ``ignore_eos``, ``max_tokens``; else the default, at most ``max_tokens``."""
        if self.ignore_eos and self.max_tokens is not None:
            if self.output_len is not None and self.output_len != self.max_tokens:
                raise ConfigError(
                    f"with ignore_eos every answer runs to max_tokens ({self.max_tokens}): the mean output is "
                    f"that, not {self.output_len:g}"
                )
            return float(self.max_tokens)
        if self.output_len is not None:
            return self.output_len
        if self.max_tokens is not None and self.max_tokens < config.workload_output_len:
            sources.append(f"mean output at most max_tokens ({self.max_tokens:,})")
            return float(self.max_tokens)
        return config.workload_output_len

    def workload(self, config: PlannerSpec) -> Workload:
        """The workload planned for, saying where its numbers come from: with a dataset, one request per user turn
        answered (``conversation_turns: all``) and per answer (``samples``), each turn's history counted."""
        prompts, input_len = self.prompts, self.input_len
        sources: list[str] = []
        output_len = self._output(config, sources)
        if self.dataset is not None:
            from tokenmill.planner.sample import measure_prompts

            rows = self.sample_rows or config.dataset_sample_rows
            measured = measure_prompts(self.dataset, rows=rows, tokenizer=self.tokenizer)
            if input_len is None:
                input_len = measured.input_len(output_len)
                history = (
                    f" (later turns with their history, {measured.history_answers:.2f} answers of "
                    f"{output_len:,.0f} tokens in it on average)"
                    if measured.history_answers
                    else ""
                )
                sources.insert(
                    0, f"input measured on {measured.rows} rows of {_name(self.dataset)}, {measured.method}{history}"
                )
            total = measured.total_rows
            if prompts is None and total:
                prompts = round(total * measured.requests_per_row * self.answers_per_row)
                sources.append(_request_count(total, measured.requests_per_row, self.answers_per_row, prompts))
        output_defaulted = self.output_len is None and not (self.ignore_eos and self.max_tokens)
        if prompts is None or input_len is None or output_defaulted:
            sources.append("defaults for what was not given")
        return Workload(
            prompts=prompts or config.workload_prompts,
            input_len=input_len or config.workload_input_len,
            output_len=output_len,
            source="; ".join(sources) or "given",
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
        )


def _request_count(rows: int, turns: float, answers: int, requests: int) -> str:
    """How the requests were counted from the dataset's rows."""
    if turns == 1 and answers == 1:
        return f"{rows:,} prompts counted in the dataset"
    per_row = f"{turns:.2f} user turns answered per row" if turns != 1 else ""
    each = f"{answers} answers each" if answers > 1 else ""
    factors = " x ".join(p for p in (per_row, each) if p)
    return f"{requests:,} requests: {rows:,} rows counted in the dataset x {factors}"


def _name(dataset: str | InputSpec) -> str:
    path = dataset.path if isinstance(dataset, InputSpec) else dataset
    return Path(path).name if path else "the input"


@dataclass(frozen=True, slots=True)
class PlanQuestion:
    """What ``tokenmill plan`` is asked."""

    model: str  # a bundled planner model or a config.json path
    gpu: str
    workload: WorkloadQuestion
    flags: tuple[str, ...] = ()  # SGLang launch flags, as typed
    gpu_count: int = 1
    eta: float | None = None  # bandwidth efficiency (None: the planner's, uncalibrated)
    compare_gpus: tuple[str, ...] = ()
    gpu_file: str | None = None
    sglang_version: str | None = None  # None: PlannerSpec.sglang_version
    train_max_length: int | None = None
    output_sigma: float | None = None  # None: PlannerSpec.workload_output_sigma
    with_what_if: bool = True


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    """The report, or why the configuration does not fit with the what-ifs that do; the training cut if asked."""

    config: PlannerSpec
    what_if: tuple[WhatIfRow, ...]
    report: PlanReport | None = None
    does_not_fit: DoesNotFitError | None = None
    cut: TrainCut | None = None


def answer(q: PlanQuestion) -> PlanAnswer:
    """Plan ``q``; a configuration that does not fit is an answer when some what-if does (else it raises)."""
    catalog = GpuCatalog.load(q.gpu_file)
    engine = parse_flags(list(q.flags))
    config = PlannerSpec.model_validate({} if q.sglang_version is None else {"sglang_version": q.sglang_version})
    spec, card = load_model(q.model), catalog.get(q.gpu)
    workload = q.workload.workload(config)
    rows = (
        tuple(what_if(spec, card, engine, workload, config, gpu_count=q.gpu_count, eta=q.eta)) if q.with_what_if else ()
    )
    try:
        result = make_plan(spec, card, engine, workload, config, gpu_count=q.gpu_count, eta=q.eta)
    except DoesNotFitError as exc:
        if not any(r.result for r in rows):
            raise
        return PlanAnswer(config, rows, does_not_fit=exc)
    comparisons = tuple(
        compare(result, catalog.get(name), config, gpu_count=q.gpu_count, eta=q.eta) for name in q.compare_gpus
    )
    eta_source = "--eta" if q.eta is not None else _default_source(card, config)
    sigma = q.output_sigma or config.workload_output_sigma
    cut = train_cut(workload, q.train_max_length, sigma) if q.train_max_length is not None else None
    ssm = ssm_assumption(spec, card, engine, workload, config, gpu_count=q.gpu_count, eta=q.eta)
    return PlanAnswer(config, rows, PlanReport(result, comparisons, rows, config, eta_source, ssm), cut=cut)


def _default_source(card: GpuSpec, config: PlannerSpec) -> str:
    if card.is_gddr:
        return f"default for {card.memory}: {config.eta_bw:g} x {config.eta_bw_gddr_ratio:g} (GDDR), uncalibrated"
    return "default, uncalibrated"
