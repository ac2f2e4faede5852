"""Failures of the pod itself, not of a worker: ranked with the workers' by the same rule.

Why: some launches end before any worker ran, or for a reason no worker holds. The kubelet stopped
the pod (a root-cause candidate at the moment its SIGTERM came), or torch's agent failed in the
rendezvous: it lost the store while the pods were still meeting, timed out waiting for a pod that
never came, or found the rendezvous closed (a victim each time: the store's host pod was stopped,
lost or cut off, or a pod never started, and only that pod, or its peers, can say why). Either must
still become the pod's document, in its place in the ranking: a launch that raised past the engine
would reach the backend as a bare ``DistNetworkError``, a victim's error that may hide the culprit's.
"""

from __future__ import annotations

import os
import signal
import socket
import time

from torch.distributed.elastic.rendezvous.api import RendezvousClosedError, RendezvousTimeoutError

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.safe_text import exception_summary
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.diagnosis.failures import WorkerFailure

STOP_MESSAGE = (
    "preempted: the pod received SIGTERM from its kubelet (a spot or preemptible node reclaimed, a node "
    "drain, an eviction or a deletion); nothing in the training failed, so a retry on another node may succeed"
)

#: How a pod's loss of the rendezvous store is told, by whether its workers had started.
STORE_LOST_MESSAGES = {
    False: "the rendezvous store{at} went away while the pods were still meeting, before this pod's workers "
    "started (the pod hosting it was stopped, lost or cut off)",
    True: "the rendezvous store{at} went away while this pod's workers ran, none of them failed "
    "(the pod hosting it was stopped, lost or cut off)",
}
#: A rendezvous that timed out: not every pod came (torch's ``RendezvousTimeoutError``).
RENDEZVOUS_TIMEOUT_MESSAGE = (
    "not every pod joined the rendezvous{at} in time (a pod never started, is still pending, or stopped "
    "while it started)"
)
#: A rendezvous another pod's agent closed (torch's ``RendezvousClosedError``): that pod ended the job.
RENDEZVOUS_CLOSED_MESSAGE = "the rendezvous{at} was closed by another pod's agent, which ended the job"


def stop_failure(received_ns: int, *, first_rank: int | None, signals: int = 1) -> WorkerFailure:
    """This pod's stop as a failure: a root-cause candidate at the moment the first SIGTERM came,
    recoverable (Flyte retries it), named by the pod's first global rank when the rendezvous gave it one."""
    more = f" ({signals} SIGTERMs)" if signals > 1 else ""
    return _pod_failure(STOP_MESSAGE + more, received_ns, Role.CANDIDATE, global_rank=first_rank,
                        signal_number=signal.SIGTERM)


def rendezvous_failure(
    error: BaseException, *, workers_started: bool, endpoint: str | None = None, noticed_ns: int | None = None
) -> WorkerFailure:
    """This pod's agent failed in the rendezvous (lost its store, timed out, found it closed) with no
    worker of its own failed (none started yet, or they all ran on): a victim (the pod that stopped,
    was lost or never came is the one that failed), recoverable, at the moment it was noticed.
    ``endpoint``: the rendezvous endpoint (``host:port``), which names the store's host pod."""
    at = f" at {endpoint}" if endpoint else ""
    if isinstance(error, RendezvousTimeoutError):
        what = RENDEZVOUS_TIMEOUT_MESSAGE.format(at=at)
    elif isinstance(error, RendezvousClosedError):
        what = RENDEZVOUS_CLOSED_MESSAGE.format(at=at)
    else:
        what = STORE_LOST_MESSAGES[workers_started].format(at=at)
    return _pod_failure(f"{what}: {exception_summary(error)}", noticed_ns or time.time_ns(), Role.VICTIM)


def _pod_failure(
    message: str,
    timestamp_ns: int,
    role: Role,
    *,
    global_rank: int | None = None,
    signal_number: int | None = None,
) -> WorkerFailure:
    return WorkerFailure(
        global_rank=global_rank,
        local_rank=None,
        group_rank=None,
        worker=current_worker_name(),
        host=socket.gethostname(),
        pid=os.getpid(),
        exitcode=None,
        signal_number=signal_number,
        exception_type=None,
        message=message,
        traceback="",
        timestamp_ns=timestamp_ns,
        time_source=TimeSource.OBSERVED,
        role=role,
        recoverable=True,
    )
