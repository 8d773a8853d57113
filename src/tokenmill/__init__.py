"""tokenmill: turn a prompt dataset into a completion corpus by driving a fleet of inference servers.

The library surface, for code that drives tokenmill without the command line::

    from tokenmill import load_job, run_job, run_sync
    result = run_sync(run_job(load_job("job.yaml")))

Names are imported on first use, so ``import tokenmill`` stays cheap (the planner and the report load none of
the request path).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "FleetSpec": "tokenmill.config",
    "JobSpec": "tokenmill.config",
    "OutputDir": "tokenmill.output",
    "RunResult": "tokenmill.run",
    "SimSpec": "tokenmill.config",
    "SimServer": "tokenmill.sim",
    "TokenmillError": "tokenmill.errors",
    "load_job": "tokenmill.config",
    "load_profile": "tokenmill.config",
    "plan": "tokenmill.planner",
    "run_job": "tokenmill.run",
    "run_sync": "tokenmill.run",
    "server_capacity": "tokenmill.planner",
    "verify": "tokenmill.output",
}
__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenmill' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return list(__all__)
