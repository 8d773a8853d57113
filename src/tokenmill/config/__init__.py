"""Job spec, fleet profile, simulated-server, planner and monitor settings: the one home of every default.

Each area has its module (job and its parts: input, sampling, retry, control, output; fleet, sim, planner, monitor,
export, observe: the alert rules' thresholds; base holds what they share); every name is imported from here.
"""

from __future__ import annotations

from tokenmill.config.base import Model, format_validation_error, normalize_url, set_dotted
from tokenmill.config.control import ControlSpec
from tokenmill.config.export import ExportSpec
from tokenmill.config.fleet import (
    TUNABLE_FLAGS,
    AutotuneSpec,
    FlagValue,
    FleetEngine,
    FleetSpec,
    WatchdogSpec,
    load_profile,
)
from tokenmill.config.input import (
    AUTO_ID_COLUMN,
    AUTO_ID_FIELD,
    BadRowPolicy,
    HFInputSpec,
    InputSpec,
    Mapping,
    PartitionSpec,
)
from tokenmill.config.job import ApiKind, JobSpec, load_job, parse_job
from tokenmill.config.monitor import DoctorSpec, MonitorSpec
from tokenmill.config.observe import AlertSpec
from tokenmill.config.output import MASKED, OutputSpec, UploadSpec
from tokenmill.config.planner import PlannerSpec
from tokenmill.config.retry import RetrySpec, backoff
from tokenmill.config.sampling import (
    THINKING_PROBE_MAX_TOKENS,
    THINKING_PROBE_WAIT_S,
    SamplingSpec,
    ThinkingInline,
    ThinkingMode,
)
from tokenmill.config.sim import FaultSpec, SimSpec

__all__ = [
    "AUTO_ID_COLUMN",
    "AUTO_ID_FIELD",
    "MASKED",
    "THINKING_PROBE_MAX_TOKENS",
    "THINKING_PROBE_WAIT_S",
    "TUNABLE_FLAGS",
    "AlertSpec",
    "ApiKind",
    "AutotuneSpec",
    "BadRowPolicy",
    "ControlSpec",
    "DoctorSpec",
    "ExportSpec",
    "FaultSpec",
    "FlagValue",
    "FleetEngine",
    "FleetSpec",
    "HFInputSpec",
    "InputSpec",
    "JobSpec",
    "Mapping",
    "Model",
    "MonitorSpec",
    "OutputSpec",
    "PartitionSpec",
    "PlannerSpec",
    "RetrySpec",
    "SamplingSpec",
    "SimSpec",
    "ThinkingInline",
    "ThinkingMode",
    "UploadSpec",
    "WatchdogSpec",
    "backoff",
    "format_validation_error",
    "load_job",
    "load_profile",
    "normalize_url",
    "parse_job",
    "set_dotted",
]
