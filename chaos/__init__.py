"""``make chaos``: a chaos run against a simulated fleet, trying hard to make tokenmill lose or duplicate a row.

Over a few minutes the client is SIGKILLed at random moments (at least 50 times), servers are killed and
restarted by the fleet, HTTP faults are injected by the servers (5xx, 429, dropped connections, JSON cut in
half, stalls past the read timeout) and by a proxy (TCP resets, truncated transfers, bodies of the wrong
shape, gateway errors), the object store goes away for a while, and the output disk fills up mid-shard.
Then one last client runs to the end, and the run must hold: ``tokenmill verify --input --remote`` passes,
every prompt is completed exactly once or failed with a reason, no sealed shard ever changed, no start
looped without progress or a reason. A summary of what was injected and survived is printed and written
as JSON.

    python -m chaos [--quick] [--kills N] [--seed S] [--json PATH] [--workdir DIR]

In code: ``run_chaos(ChaosConfig.full_run(seed))`` or ``ChaosConfig.quick_run(seed)`` returns a :class:`ChaosReport`.
"""

from chaos.config import ChaosConfig
from chaos.harness import run_chaos
from chaos.report import ChaosReport

__all__ = ["ChaosConfig", "ChaosReport", "run_chaos"]
