"""The work a server is sent: idle (nothing running, nothing queued), or under-fed by a client below its limit.

Neither is a problem of the server, and neither names a binding resource (a run's tail is under-fed whatever bound
the run); each is said so that "no problem found" is only ever said of servers that run what their pools hold. A
client at its in-flight limit is the client rules' case (``client-underfeeding``)."""

from __future__ import annotations

from tokenmill.config import DoctorSpec
from tokenmill.doctor import advice
from tokenmill.doctor.checks.signs import rate_text, running_text, waiting
from tokenmill.doctor.model import ClientObs, Finding, ServerObs
from tokenmill.fmt import UNKNOWN, num


def _inflight(o: ServerObs) -> str:
    side = o.client
    sent = num(side.inflight) if side.inflight is not None else UNKNOWN
    return f"{sent}/{side.limit if side.limit else UNKNOWN}"


def idle(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v = o.view
    if not v.healthy or v.running is None or v.queued is None or waiting(v, t):
        return None
    if (v.running_peak if v.running_peak is not None else v.running) > 0 or (v.decode_tok_s or 0) > 0:
        return None
    return Finding(
        summary=f"nothing running, {num(v.queued)} queued, {num(v.decode_tok_s)} decode tok/s: no work is sent",
        evidence=(
            ("running / max running", running_text(v)),
            ("queue", num(v.queued)),
            ("decode tok/s", rate_text(v, v.decode_tok_s)),
            ("client in flight / limit", _inflight(o)),
        ),
        advice="The server is up and does nothing: no run sends to it (none started, it finished, or it is paused "
        "for its upload backlog), or the client set this server aside. Nothing on the server binds; start or "
        "resume the run, or check that its servers file names this server.",
        severity="info",
    )


def under_fed(o: ServerObs, c: ClientObs, t: DoctorSpec) -> Finding | None:
    v, side = o.view, o.client
    if not v.healthy or not v.max_running or v.running is None or v.queued is None or v.running <= 0:
        return None
    if waiting(v, t) or side.limit is None or side.inflight is None:
        return None  # a queue: the server is fed; an unknown client: the client rules say what is known
    if side.inflight >= min(t.client_at_limit * side.limit, side.limit - 1):
        return None  # the client at its limit: client-underfeeding
    hold, held_by = advice.pool_hold(o, c, t.pool_full) or (v.max_running, f"the running cap ({v.max_running})")
    if v.running >= t.at_cap * hold:
        return None
    return Finding(
        summary=f"running {running_text(v)} with no queue; the client has {_inflight(o)} in flight, below its "
        f"limit; the pools hold {hold}",
        evidence=(
            ("running / max running", running_text(v)),
            ("queue", num(v.queued)),
            ("client in flight / limit", f"{_inflight(o)} (below its limit)"),
            ("requests the pools hold", f"{hold}: {held_by}"),
            ("decode tok/s", rate_text(v, v.decode_tok_s)),
        ),
        advice=f"The server could run {num(hold - v.running)} more requests, and the client is not at its limit: "
        "it has no more to send (the input's last prompts, or prompts waiting for a retry). Nothing to change on "
        "the server; at the tail of a run this is expected.",
        severity="info",
    )
