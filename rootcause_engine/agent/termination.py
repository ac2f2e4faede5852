"""The kubelet's SIGTERM to the pod: noted with its time, acted on once, and never a silent exit.

Why: Kubernetes stops a pod (a spot reclaim, a node drain, an eviction, a deletion) by sending
SIGTERM to its main process, then SIGKILL after ``terminationGracePeriodSeconds`` (30 s by
default). torch's agent turns the SIGTERM into ``SignalException`` (it shuts its workers down and
re-raises), and kfpytorch turns that into ``IgnoreOutputs``: the pod exits 0 having written
nothing, the training operator marks the job Succeeded at that exit, and Flyte finds no error. A
stopped pod must instead be the job's recorded, recoverable root cause, written within the grace.

The pod's one notice is :data:`rootcause_core.pod_stop.POD_STOP` (the entrypoint may have installed
it before the task was even loaded). Around the launch:

- ``PodStopNotice.install``: it is the process's SIGTERM handler from the launch session on, and
  stays so after the launch: a SIGTERM while the pod writes its documents must not end it (Python's
  default would);
- :func:`armed` (the block of the launch): the first SIGTERM is raised as torch's own
  ``SignalException``, so torch's agent ends the workers (victims) and the launch ends, whether it
  was in the rendezvous, in training or in its exit barrier; a SIGTERM that came *before* the block
  (while the pod started, downloaded its inputs, loaded the task) ends the launch as it starts;
- any other SIGTERM (a second one, one while the pod writes its own failure report, one after the
  launch ended) is only noted: the pod finishes what it writes and exits 0.

torch installs its handler again for every attempt's workers: :func:`patch_termination_handler`
routes that handler's SIGTERM here too.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import NoReturn

from rootcause_core.pod_stop import PodStopNotice
from rootcause_engine.upstream.torch_elastic import patch_termination_handler, signal_exception


def _raise_signal_exception(signum: int) -> NoReturn:
    raise signal_exception(signum)


@contextlib.contextmanager
def armed(notice: PodStopNotice) -> Iterator[None]:
    """The block of the launch: its first SIGTERM ends the launch as torch's would; one that came
    before the block ends it at once (raised here, before torch starts anything)."""
    if notice.received:
        _raise_signal_exception(signal.SIGTERM)
    notice.on_first = _raise_signal_exception
    try:
        with patch_termination_handler(notice):
            yield
    finally:
        notice.on_first = None
