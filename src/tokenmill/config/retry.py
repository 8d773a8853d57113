"""How failed requests are retried and timed out, and when a server is set aside."""

from __future__ import annotations

from pydantic import Field

from tokenmill.config.base import Model


def backoff(attempt: int, base_s: float, max_s: float) -> float:
    """The wait before retry ``attempt`` (1, 2, ...): ``base_s`` doubling each time, at most ``max_s``."""
    return min(max_s, base_s * 2.0 ** min(max(attempt, 1) - 1, 60))


class RetrySpec(Model):
    """How failures are retried, and when a server is set aside."""

    max_attempts: int = Field(default=8, ge=1, description="Attempts per prompt for transient errors")
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=1800.0, gt=0, description="Per request; long generations take time")
    read_timeout_max_s: float = Field(
        default=7200.0,
        gt=0,
        description="The ceiling a server's read timeout grows to (doubling) when answers take longer than it while "
        "the server runs them (nothing queued); at the ceiling that server runs fewer at once instead",
    )
    abandoned_report_after: int = Field(
        default=3,
        ge=1,
        description="A prompt abandoned on read timeouts this many times is named in the log and the summary",
    )
    max_response_mb: float = Field(
        default=64.0, gt=0, description="A response body larger than this is refused (a broken or hostile server)"
    )
    quarantine_after: int = Field(default=5, ge=1, description="Consecutive failures before quarantine")
    probe_interval_s: float = Field(default=5.0, gt=0, description="How often a quarantined server is probed")
    startup_wait_s: float = Field(
        default=300.0,
        ge=0,
        description="At start, how long the run waits (probing every probe_interval_s) for a first server to "
        "answer its health check; when none has, it exits 2 naming each URL and its error (a mistyped or dead "
        "URL). Once any server has answered, servers that go away are waited for and probed for as long as it "
        "takes",
    )
    stop_grace_s: float = Field(
        default=10.0, ge=0, description="After a stop request, how long requests in flight may finish (then: resume)"
    )

    def backoff_s(self, attempt: int) -> float:
        """The wait before retrying a prompt after its ``attempt``-th try (jitter is the dispatcher's)."""
        return backoff(attempt, self.backoff_base_s, self.backoff_max_s)

    @property
    def max_response_bytes(self) -> int:
        return int(self.max_response_mb * (1 << 20))
