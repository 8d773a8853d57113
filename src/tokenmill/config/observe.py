"""The alert rules' thresholds (``observability/prometheus/tokenmill.rules.yml``, generated from them)."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model
from tokenmill.config.monitor import DoctorSpec

_DOCTOR = DoctorSpec()


class AlertSpec(Model):
    """When the generated Prometheus alerts fire; durations are Prometheus's (``5m``, ``1h``)."""

    evaluation_interval: str = Field(default="30s", description="How often Prometheus evaluates the rules")
    server_down_for: str = Field(
        default="2m", description="A server's /metrics unreachable this long (or the run sees it down) fires"
    )
    no_progress_window: str = Field(
        default="10m", description="No prompt finished within this window (the job not done yet) ..."
    )
    no_progress_for: str = Field(default="5m", description="... held this long fires")
    slow_share: float = Field(
        default=0.5, gt=0, le=1, description="The fleet's decode rate below this share of what the planner expects"
    )
    slow_for: str = Field(default="15m", description="... this long fires")
    backlog_for: str = Field(
        default="1m", description="Uploads past output.upload.max_backlog (generation paused) this long fires"
    )
    upload_behind_s: float = Field(
        default=_DOCTOR.upload_behind_s, gt=0, description="The oldest sealed shard waiting this long for upload"
    )
    failure_share: float = Field(
        default=0.01, gt=0, le=1, description="Failed prompts above this share of those finished, over 10 minutes"
    )
    failure_for: str = Field(default="10m", description="... this long fires")
    truncated_share: float = Field(
        default=_DOCTOR.truncated_share, gt=0, le=1, description="Answers cut at max_tokens above this share"
    )
    truncated_for: str = Field(default="15m", description="... this long fires")
