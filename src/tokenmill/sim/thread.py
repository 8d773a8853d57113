"""A simulated server on a background thread, for synchronous code and tests.

::

    with run_sim_in_thread(SimSpec(instant=True)) as sim:
        requests.post(sim.url + "/generate", json={"text": "hi"})

``run_sim_in_thread`` returns once the server is listening; ``stop()`` (or leaving the ``with``) stops the
server, its event loop and the thread.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from tokenmill.config import SimSpec
from tokenmill.sim.server import SimServer
from tokenmill.sim.timing import StepModel

_START_TIMEOUT_S = 30.0


class SimThread:
    """A :class:`SimServer` running on its own event loop in a daemon thread."""

    def __init__(self, cfg: SimSpec | None = None, *, step_model: StepModel | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tokenmill-sim", daemon=True)
        self._thread.start()
        self.server = SimServer(cfg, step_model=step_model)
        try:
            self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(_START_TIMEOUT_S)
        except BaseException:
            self._shutdown_loop()
            raise

    def stop(self) -> None:
        """Stop the server and the thread (idempotent)."""
        if not self._loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(_START_TIMEOUT_S)
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SimThread:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def run_sim_in_thread(cfg: SimSpec | None = None, *, step_model: StepModel | None = None) -> SimThread:
    """Start a simulated server on a background thread; returns once it listens (see ``.url``)."""
    return SimThread(cfg, step_model=step_model)
