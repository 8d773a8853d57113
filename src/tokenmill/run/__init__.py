"""One job on the client's event loop, in data-flow order: the feed streams prompts (``feed``), the dispatcher
sends them to the servers it picks (``dispatch``, ``servers``, ``turns``), concurrency follows the servers'
metrics (``control``), the servers file is followed (``endpoints``), and the run is watched (``watch``,
``progress``, ``exporter``) and summed up (``summary``). ``runner.run_job`` puts it together.
"""

from tokenmill.run.runner import RunResult, run_job, run_sync

__all__ = ["RunResult", "run_job", "run_sync"]
