"""One job on the client's event loop, in data-flow order: the run's output place is settled (``target``), the
servers and the API key are read once (``access``) and a first server awaited (``startup``), the remote prefix
is taken and the uploader started (``remote``), the feed streams prompts (``feed``; too many skipped rows stop
the run: ``skips``), the dispatcher sends them as work items (``work``, one user turn at a time for whole
conversations) to the servers it picks (``dispatch``, ``servers``), concurrency follows the servers' metrics
(``control``), uploads too far behind pause generation (``backlog``), the servers file is followed and the
display ticked (``endpoints``, ``housekeeping``), the run is watched (``watch``, ``progress``, ``exporter``,
``collector``, ``efficiency``, ``eta``), the doctor's advice is tried on the live fleet and measured
(``autotune``, ``tuning``, ``measure``), and the run is summed up (``summary``). ``runner.run_job`` puts it
together on the run's state (``runstate``).
"""

from tokenmill.run.runner import RunResult, run_job, run_sync

__all__ = ["RunResult", "run_job", "run_sync"]
