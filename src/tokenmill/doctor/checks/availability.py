"""Server availability: a server down, or flapping between up and down."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.model import Candidate, ClientObs, Finding, ServerObs


def server_down(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not o.client.usable:
        reason = o.client.problem or "too many failures in a row"
    elif not v.healthy and v.scrapes and (v.down_for_s or 0.0) >= t.down_after_s:
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


def flapping(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if v.transitions < t.flap_transitions:
        return None
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
        ),
        advice="The server keeps dropping out and coming back: look in its log for restarts and out-of-memory "
        "errors. If memory runs out under load, lower --mem-fraction-static a little or cap "
        "--max-running-requests.",
        candidates=cand,
        severity="critical",
    )
