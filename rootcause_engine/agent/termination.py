"""The kubelet's SIGTERM to the pod: noted with its time, acted on once, and never a silent exit.

Why: Kubernetes stops a pod (a spot reclaim, a node drain, an eviction, a deletion) by sending
SIGTERM to its main process, then SIGKILL after ``terminationGracePeriodSeconds`` (30 s by
default). torch's agent turns the SIGTERM into ``SignalException`` (it shuts its workers down and
re-raises), and kfpytorch turns that into ``IgnoreOutputs``: the pod exits 0 having written
nothing, the training operator marks the job Succeeded at that exit, and Flyte finds no error. A
preempted pod must instead be the job's recorded, recoverable root cause, written within the grace.

:class:`TerminationNotice` is the pod's SIGTERM handler for the whole launch session:

- while the launch runs (:meth:`TerminationNotice.armed`), the first SIGTERM is noted (its time in
  nanoseconds) and raised as torch's own ``SignalException``, so torch's agent ends the workers
  (victims) and the launch ends, whether it was in the rendezvous, in training or in its exit barrier;
- any other SIGTERM (a second one, one while the pod writes its own failure report, one after the
  launch ended) is only noted: the pod finishes what it writes and exits 0.

torch installs its handler again for every attempt's workers: :func:`patch_termination_handler`
routes that handler's SIGTERM here too.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from rootcause_engine.upstream.torch_elastic import patch_termination_handler, signal_exception

logger = logging.getLogger(__name__)


class TerminationNotice:
    """This pod's SIGTERMs (see the module docstring)."""

    def __init__(self) -> None:
        self.received_ns: int | None = None
        self.count = 0
        self._armed = False

    @property
    def received(self) -> bool:
        return self.received_ns is not None

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        first = self.received_ns is None
        if first:
            self.received_ns = time.time_ns()
        logger.warning("SIGTERM %d received (the pod is being stopped: preemption, drain, eviction or deletion)",
                       self.count)
        if first and self._armed:
            self._armed = False
            raise signal_exception(signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[TerminationNotice]:
        """This notice is the process's SIGTERM handler from now on (main thread only: elsewhere
        Python cannot install one, and torch would not either). It stays installed after the block:
        a SIGTERM while the pod writes its documents must not end it (Python's default would)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self)
        yield self

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """The block of the launch: its first SIGTERM ends the launch as torch's would."""
        self._armed = not self.received
        try:
            with patch_termination_handler(self):
                yield
        finally:
            self._armed = False
