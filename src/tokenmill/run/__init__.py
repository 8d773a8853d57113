"""One job on the client's event loop; ``runner.run_job`` puts the stages together on the run's state (``runstate``).

The stages, in data-flow order:
- where the run writes (``target``); what it reads once from outside: servers and key (``access``); a first
  server awaited (``startup``); the input peeked, the backend built and the servers probed (``requests``);
- the remote prefix taken and the uploader started (``remote``);
- the feed (``feed``; too many skipped rows stop the run: ``skips``); work items, one user turn at a time
  (``work``); the dispatcher and its servers (``dispatch``, ``servers``; a failed attempt sent again or
  recorded: ``retries``; requests given up on read timeouts: ``abandon``); in-flight targets from the servers'
  metrics (``control``);
- uploads too far behind pause generation (``backlog``); the housekeeping loop (``housekeeping``);
- the watch (``watch``, the frozen state it hands the tracker, ``watchstate``, ``progress``, the metrics port,
  ``prometheus``, and the table of the numbers it serves, ``metrics``, the live page's samples, ``viewer``,
  ``collector``, ``efficiency``, ``eta``);
- the summary (``summary``).
A run with its own fleet (``with_fleet``) and a job split over N clients (``partitions``) start from here too.
"""

from tokenmill.run.runner import RunResult, run_job, run_sync

__all__ = ["RunResult", "run_job", "run_sync"]
