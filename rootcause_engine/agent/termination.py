"""The kubelet's SIGTERM to the pod: noted with its time, acted on once, and never a silent exit.

Why: Kubernetes stops a pod with SIGTERM, then SIGKILL after a grace (30 s by default). Torch's
agent turns the SIGTERM into ``SignalException``, and kfpytorch turns that into ``IgnoreOutputs``.
The pod exits 0 having written nothing, and the job reads as succeeded. A stopped pod must instead
be the job's recorded, recoverable root cause, written within the grace. So the first SIGTERM in
the launch ends the launch, and any other is only noted. How: ``docs/design.md``.
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
