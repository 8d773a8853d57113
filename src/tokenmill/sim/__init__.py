"""The simulated SGLang server (``tokenmill sim``): SGLang's HTTP surface, metrics and log lines over a
cheap continuous-batching scheduler, with seeded output and injectable faults.

Modules: ``server`` (aiohttp app, :class:`SimServer`) · ``thread`` (:func:`run_sim_in_thread`) ·
``engine`` (async driver) · ``scheduler`` (batching state machine) · ``timing`` (:class:`StepModel`, the
replaceable physics) · ``api`` (request/response shapes) · ``text`` (seeded text and token ids) ·
``faults`` · ``metrics`` · ``info``.
"""

from tokenmill.sim.server import SimServer
from tokenmill.sim.thread import SimThread, run_sim_in_thread
from tokenmill.sim.timing import LinearStepModel, PoolUsage, StepModel

__all__ = ["LinearStepModel", "PoolUsage", "SimServer", "SimThread", "StepModel", "run_sim_in_thread"]
