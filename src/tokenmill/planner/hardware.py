"""GPU catalog: memory (size, technology), bandwidth and dense tensor peaks, each with its source and unverified marks.

The bundled table is ``gpus.yaml`` (its numbers and their sources: docs/reference/hardware.md); users add their own GPUs
in a YAML file of the same shape (``--gpu-file``). Names match case- and punctuation-insensitively, so
``RTX-PRO-6000``, ``rtx pro 6000`` and ``rtxpro6000`` are the same card.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass

from tokenmill.config import format_validation_error
from tokenmill.errors import ConfigError
from tokenmill.planner.models import WeightDtype

GIB = 1 << 30


_POSITIVE = Field(gt=0)

MemoryKind = Literal["hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"]


@dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class GpuSpec:
    """One GPU model. Throughputs are dense (no 2:4 sparsity); ``None`` means no tensor-core support. A row of a
    GPU file validates straight into it (:func:`parse_gpu_table`)."""

    key: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    memory_mib: Annotated[int, Field(gt=0, description="Memory the driver reports, MiB (nvidia-smi memory.total)")]
    bandwidth_gbs: Annotated[float, Field(gt=0, description="Peak memory bandwidth, GB/s (decimal)")]
    bf16_tflops: Annotated[float, Field(gt=0, description="Dense BF16 tensor TFLOP/s")]
    memory: Annotated[
        MemoryKind | None,
        Field(description="Memory technology; unset is planned as HBM, the technology the default eta is fitted on"),
    ] = None
    fp8_tflops: Annotated[float | None, _POSITIVE] = None
    fp4_tflops: Annotated[float | None, _POSITIVE] = None
    power_w: Annotated[float | None, _POSITIVE] = None
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    notes: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def is_gddr(self) -> bool:
        """Point-to-point graphics memory (GDDR6/6X/7) rather than stacked HBM."""
        return self.memory is not None and self.memory.startswith("gddr")

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gbs * 1e9

    def matmul_flops(self, weight_dtype: WeightDtype) -> float:
        """Dense FLOP/s of decoder GEMMs with ``weight_dtype`` weights (lower formats fall back to higher ones)."""
        tflops = self.bf16_tflops
        if weight_dtype == "fp4":
            tflops = self.fp4_tflops or self.fp8_tflops or self.bf16_tflops
        elif weight_dtype == "fp8":
            tflops = self.fp8_tflops or self.bf16_tflops
        return tflops * 1e12

    def is_unverified(self, field_name: str) -> bool:
        return field_name in self.unverified


class _GpuFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: list[GpuSpec]


def normalize_name(name: str) -> str:
    """The matching key of a name: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def parse_gpu_table(data: Any, where: str) -> list[GpuSpec]:
    """Validate a ``{gpus: [...]}`` mapping; ConfigError names each bad field."""
    try:
        return _GpuFile.model_validate(data).gpus
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where)) from exc


def _read_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc


def bundled_gpus() -> list[GpuSpec]:
    """The GPUs shipped with tokenmill."""
    text = resources.files("tokenmill.planner").joinpath("gpus.yaml").read_text(encoding="utf-8")
    return parse_gpu_table(_read_yaml(text, "bundled gpus.yaml"), "bundled gpus.yaml")


def load_gpu_file(path: str | Path) -> list[GpuSpec]:
    """User-defined GPUs from a YAML file shaped like the bundled ``gpus.yaml``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read GPU file {p}: {exc}") from exc
    return parse_gpu_table(_read_yaml(text, str(p)), str(p))


class GpuCatalog:
    """Looks GPUs up by key or alias; user entries shadow bundled ones with the same key."""

    def __init__(self, gpus: list[GpuSpec]) -> None:
        self._by_name: dict[str, GpuSpec] = {}
        self._gpus: dict[str, GpuSpec] = {}
        for gpu in gpus:
            self._gpus[gpu.key] = gpu
        for gpu in self._gpus.values():
            for name in (gpu.key, *gpu.aliases):
                self._by_name[normalize_name(name)] = gpu

    @classmethod
    def load(cls, extra_file: str | Path | None = None) -> GpuCatalog:
        gpus = bundled_gpus()
        if extra_file is not None:
            gpus += load_gpu_file(extra_file)
        return cls(gpus)

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._gpus.values())

    def get(self, name: str) -> GpuSpec:
        gpu = self._by_name.get(normalize_name(name))
        if gpu is None:
            known = ", ".join(sorted(self._gpus))
            raise ConfigError(
                f"unknown GPU {name!r}; known: {known}. Add it to a YAML file shaped like gpus.yaml and pass --gpu-file"
            )
        return gpu
