"""The capacity planner: SGLang pool sizes, concurrency and decode throughput for (model, GPU, flags).

Modules, one concept each: ``models`` (geometry, parameters, KV/state bytes), ``hfconfig`` (a config.json
read), ``catalog`` (bundled configs), ``hardware`` (GPU table), ``flags`` (SGLang flag spellings), ``strategy``
(the radix-cache strategy and its slots per request), ``memory`` (SGLang's pool sizing), ``roofline`` (decode
step time), ``capacity`` (one server replica: what other modules call), ``admission`` (SGLang's KV admission rule
per request kind), ``workload`` (what to plan for), ``plan`` (operating point, comparison, what-if),
``calibrate`` (fit eta from measurements), ``render`` (tables and JSON), ``sample`` (prompt lengths from a
dataset), ``question`` (``tokenmill plan`` as a call), ``run_files`` (a job file's requests). The math is pure;
only ``catalog``, ``hardware``, ``sample`` and ``run_files`` read files. docs/planner.md explains
the model and its sources.
"""

from __future__ import annotations

from tokenmill.errors import DoesNotFitError
from tokenmill.planner.calibrate import Calibration, ThroughputSample, fit_eta
from tokenmill.planner.capacity import ServerCapacity, build_capacity, server_capacity
from tokenmill.planner.catalog import bundled_models, load_model
from tokenmill.planner.flags import EngineFlags, command_line, parse_flags
from tokenmill.planner.hardware import GpuCatalog, GpuSpec
from tokenmill.planner.memory import PoolPlan, size_pools
from tokenmill.planner.models import ModelSpec
from tokenmill.planner.plan import PlanResult, Workload, compare, plan
from tokenmill.planner.whatif import what_if

__all__ = [
    "Calibration",
    "DoesNotFitError",
    "EngineFlags",
    "GpuCatalog",
    "GpuSpec",
    "ModelSpec",
    "PlanResult",
    "PoolPlan",
    "ServerCapacity",
    "ThroughputSample",
    "Workload",
    "build_capacity",
    "bundled_models",
    "command_line",
    "compare",
    "fit_eta",
    "load_model",
    "parse_flags",
    "plan",
    "server_capacity",
    "size_pools",
    "what_if",
]
