"""Server availability: a server down, or flapping between up and down; a scrape gap that is neither.

A server whose ``/metrics`` scrapes time out while its requests keep succeeding is not down: that is a gap in the
monitoring (a busy server or a CPU-starved machine answers its work before its metrics), said as such and binding
nothing. A server the client got no failed request from is not flapping, whatever its scrapes did.
"""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import Candidate, ClientObs, Finding, ServerObs
from tokenmill.fmt import duration, num


def answers_through_gap(o: ServerObs) -> bool:
    """Whether the server's scrapes time out while the client's requests to it succeed (a monitoring gap)."""
    v, side = o.view, o.client
    if v.healthy or not v.missed_scrapes or not side.usable or side.completed_age_s is None:
        return False
    return v.gap_s is None or side.completed_age_s <= v.gap_s


def server_down(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not o.client.usable:
        reason = o.client.problem or "too many failures in a row"
    elif not v.healthy and v.scrapes and (v.down_for_s or 0.0) >= t.down_after_s and not answers_through_gap(o):
        reason = v.error or "no answer"
    else:
        return None
    return Finding(
        summary=f"not usable: {reason}",
        evidence=(("state", "unreachable" if not v.healthy else "set aside by the client"), ("reason", reason)),
        advice="Check the server process and its log. A running tokenmill keeps probing it and sends work again "
        "as soon as it answers; nothing is marked failed meanwhile. If it is gone for good, drop it from servers.",
        severity="critical",
    )


def monitoring_gap(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v, side = o.view, o.client
    if not answers_through_gap(o) or (v.gap_s or 0.0) < t.down_after_s:
        return None
    age = side.completed_age_s or 0.0
    return Finding(
        summary=f"{v.missed_scrapes} /metrics scrapes in a row timed out over {duration(v.gap_s or 0.0)}, while its "
        f"requests succeed (the last {duration(age)} ago): a monitoring gap, the server works",
        evidence=(
            ("scrapes timed out in a row", f"{v.missed_scrapes}, over {duration(v.gap_s or 0.0)}"),
            ("last completion", f"{duration(age)} ago"),
            ("failed requests to it", num(side.errors) if side.errors is not None else "unknown"),
        ),
        advice="The server answers its requests but not its /metrics in time (a busy server, or a machine short of "
        "CPU): its numbers are missing for that time, nothing else. Raise monitor.scrape_timeout_s or give the "
        "client's machine more CPU; nothing needs restarting.",
        severity="info",
    )


def flapping(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if v.transitions < t.flap_transitions:
        return None
    if o.client.errors == 0 and o.client.usable:
        return None  # every request it got succeeded: its scrapes came and went, the server did not
    info = v.info
    cand: tuple[Candidate, ...] = ()
    if info is not None and info.mem_fraction_static is not None and info.mem_fraction_static > 0.5:
        lower = advice.mem_fraction(o, step=-0.03, ceiling=1.0)
        cand = (lower,) if lower else ()
    return Finding(
        summary=f"{v.transitions} up/down changes within {t.flap_window_s / 60:.0f} min",
        evidence=(
            ("up/down changes", f"{v.transitions} in {t.flap_window_s / 60:.0f} min"),
            ("now", "up" if v.healthy else "down"),
            ("last error", v.error or "-"),
            ("failed requests to it", num(o.client.errors) if o.client.errors is not None else "unknown"),
        ),
        advice="The server keeps dropping out and coming back: look in its log for restarts and out-of-memory "
        "errors. If memory runs out under load, lower --mem-fraction-static a little or cap "
        "--max-running-requests.",
        candidates=cand,
        severity="critical",
    )
