"""The kubelet's SIGTERM to this pod's main process, noted from the first moment the process can.

Kubernetes stops a pod with SIGTERM, then SIGKILL after a grace period. Python's default ends the
process at once with a non-zero status. The training operator then marks the whole PyTorchJob Failed,
and Flyte reads no error document at all. So the entrypoint installs :data:`POD_STOP` as the SIGTERM
handler before anything else. A stop while the pod still starts is then recorded like one during
training. The module is torch-free, because plain tasks pass through the same entrypoint.
``docs/messages.md`` tells what happens to the noted stop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class PodStopNotice:
    """SIGTERMs to this process: the first one's time (ns), how many, and who acts on the first one.

    ``on_first`` (set by the launch while it runs) is called from the handler with the signal number
    for the first SIGTERM only; every later one is only counted: the pod is already on its way out
    and must finish writing what it owes (its document, exit 0) within the grace.
    """

    def __init__(self) -> None:
        self.received_ns: int | None = None
        #: the first SIGTERM on this process's monotonic clock: the grace left is measured from it
        self.received_monotonic: float | None = None
        self.count = 0
        self.on_first: Callable[[int], None] | None = None
        self.installed = False
        #: the process that installed it: a worker forked from it inherits the handler, not the notice
        self._owner_pid: int | None = None

    @property
    def received(self) -> bool:
        return self.received_ns is not None

    def __call__(self, signum: int, frame: Any) -> None:
        if self._owner_pid is not None and os.getpid() != self._owner_pid:
            # a worker forked from the pod's main process (torch's ``fork`` start method): the agent's
            # teardown SIGTERMs it, and it must end as a plain process would, not note it and live on
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.count += 1
        first = self.received_ns is None
        if first:
            self.received_ns = time.time_ns()
            self.received_monotonic = time.monotonic()
        logger.warning("SIGTERM %d received (the pod is being stopped: preemption, drain, eviction or deletion)",
                       self.count)
        if first and self.on_first is not None:
            act, self.on_first = self.on_first, None
            act(signum)

    def install(self) -> bool:
        """Make this the process's SIGTERM handler (main thread only: elsewhere Python cannot)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        signal.signal(signal.SIGTERM, self)
        self.installed = True
        self._owner_pid = os.getpid()
        return True

    def release(self) -> None:
        """Give SIGTERM back to Python's default, for a task that does not report its root cause:
        a SIGTERM noted meanwhile is delivered again, so the process ends as it would have."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.installed = False
        if self.received:
            os.kill(os.getpid(), signal.SIGTERM)


#: This process's notice: one process is one pod's main process.
POD_STOP = PodStopNotice()
