"""The doctor's rules, one row each: what binds, when it fires, the evidence it shows and what to change.

Read the table (:data:`RULES`) first; each check it names is a few lines over the observed numbers, in a module of
its family under :mod:`tokenmill.doctor.checks`. Server checks see one server (its window means and rates, its
``/server_info``, the client's side of it and, when the planner knows the model and GPU, the planner's picture of it
today: which side of the roofline its decode step is on, how much of its time goes to prefill); client checks see the
whole observation. Thresholds come from :class:`~tokenmill.config.DoctorSpec`; ``when`` names them by their field.
Verdicts are ranked by their predicted impact (:mod:`tokenmill.doctor.engine`); the table's order only breaks ties.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tokenmill.config import DoctorSpec
from tokenmill.doctor.checks.availability import flapping, monitoring_gap, server_down
from tokenmill.doctor.checks.client import client_bound, client_underfeeding, queue_timeout, work_timeout
from tokenmill.doctor.checks.corpus import truncation, uploads_behind
from tokenmill.doctor.checks.load import idle, under_fed
from tokenmill.doctor.checks.pools import kv_bound, retractions, scheduler_conservative, state_pool_bound
from tokenmill.doctor.checks.roofline import compute_bound, prefill_heavy, running_cap
from tokenmill.doctor.checks.signs import hybrid
from tokenmill.doctor.model import ClientObs, Finding, Observation, ServerObs
from tokenmill.planner.admission import CLIP_MAX_NEW_TOKENS

__all__ = ["RULES", "RULE_IDS", "Rule", "hybrid"]

ServerCheck = Callable[[ServerObs, ClientObs, DoctorSpec], Finding | None]
ClientCheck = Callable[[Observation, DoctorSpec], Finding | None]


# ---- the table ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    binds: str  # the resource that limits throughput when the rule fires ("" for a rule about the corpus)
    when: str  # the condition, in words
    check: ServerCheck | None = None  # per server
    check_client: ClientCheck | None = None  # once for the whole client


RULES: tuple[Rule, ...] = (
    Rule("server-down", "server down", "server availability",
         "unreachable for down_after_s, or set aside by the client", check=server_down),
    Rule("flapping", "server flapping", "server availability",
         "flap_transitions up/down changes within flap_window_s (scrape timeouts are no change), and the client "
         "saw a failed request from it", check=flapping),
    Rule("monitoring-gap", "monitoring gap", "",  # its numbers are missing, the server works: binds nothing
         "its /metrics scrapes time out for down_after_s while the client's requests to it succeed",
         check=monitoring_gap),
    Rule("truncated", "answers cut at max_tokens", "",  # the corpus's loss, not a throughput limit
         "at least truncated_share of the answers hit max_tokens (finish reason length), once "
         "truncated_min_answers answers are in", check_client=truncation),
    Rule("queue-timeout", "queue wait exceeds the read timeout", "client concurrency",
         "a request outlived retry.read_timeout_s on a server that held a queue or kept answering (overload), "
         "within timeout_recent_s", check=queue_timeout),
    Rule("work-timeout", "answers outlive the read timeout", "client read timeout",
         "a request outlived the read timeout while its server ran it with nothing queued, within timeout_recent_s",
         check=work_timeout),
    Rule("uploads-behind", "uploads behind", "",  # the durable copy's lag, not a throughput limit
         "sealed shards wait for upload, the oldest for upload_behind_s, or generation is paused for the backlog",
         check_client=uploads_behind),
    Rule("client-bound", "client bound", "client CPU",
         "client CPU >= client_cpu or event-loop lag >= loop_lag_s, while most servers have no queue",
         check_client=client_bound),
    Rule("client-underfeeding", "client under-feeding", "client concurrency",
         "queue below queue_waiting, running below at_cap x what the pools hold (within the cap), client in "
         "flight at client_at_limit of its limit or within one request of it", check=client_underfeeding),
    Rule("state-pool-bound", "state-pool bound", "state pool",
         "requests queued, KV below pool_full, and the state pool full or the cap = state slots // slots per request",
         check=state_pool_bound),
    Rule("kv-bound", "KV bound", "KV cache",
         "requests queued and the KV pool at least pool_full; or at least pool_roomy while the mean running is "
         "below at_cap x the cap; or one more request at its full length (prompt + max_tokens, of which SGLang "
         f"counts at most {CLIP_MAX_NEW_TOKENS:,}) would not fit beside what the running ones hold and reserve "
         "(SGLang admits a request only then, so its KV gauge shows room)", check=kv_bound),
    Rule("retractions", "retractions / preemptions", "KV cache",
         "at least retractions_per_min retractions (SGLang) or preemptions (vLLM) per minute", check=retractions),
    Rule("scheduler-conservative", "conservative admission", "scheduler",
         "a queue that never empties while running is below the cap and both pools below pool_roomy",
         check=scheduler_conservative),
    Rule("running-cap", "at its running cap", "running cap",
         "requests queued, running at the cap (the window's peak), neither pool holding admission back (kv-bound), "
         "the decode step not compute-bound",
         check=running_cap),
    Rule("compute-bound", "compute bound", "compute",
         "requests queued or running at the cap, and the planner's roofline puts the decode step on the compute "
         "side", check=compute_bound),
    Rule("under-fed", "under-fed", "",  # the load, not a resource: a run's tail ends so, and says nothing of its run
         "no queue, running below at_cap x what the pools hold, the client's in-flight known and below "
         "client_at_limit of its limit (it has no more to send)", check=under_fed),
    Rule("idle", "idle", "",  # no load at all: nothing binds
         "nothing running (the window's peak), nothing queued, no decode: no work is sent", check=idle),
    Rule("prefill-heavy", "prefill heavy", "prefill",
         "prompt tok/s at least prefill_ratio x decode tok/s, or prefill at least prefill_dominates of the GPU's "
         "time (planner)", check=prefill_heavy),
)  # fmt: skip

RULE_IDS = tuple(r.id for r in RULES)
