"""What the entrypoint tests' tasks raise: user errors, and root-cause errors as the agent builds them.

Steered by environment variables the test sets, so one function serves every case:
``ROOTCAUSE_TEST_TIMESTAMP_NS`` (the root cause's time), ``_F_WN`` (the worker the failure names),
``ROOTCAUSE_TEST_BARRIER_DIR`` (start barrier of the concurrent-writers test).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.diagnosis.failures import WorkerFailure

#: Default root-cause time: non-zero digits below the microsecond (789 ns), which a float of
#: seconds since the epoch cannot carry.
DEFAULT_TIMESTAMP_NS = 1_763_700_000_123_456_789

BARRIER_READY = "ready"
BARRIER_FIFO = "go"
BARRIER_TIMEOUT_S = 180


def failures(recoverable: bool) -> list[WorkerFailure]:
    """The root cause (rank 1, recorded by the worker) and one victim (rank 0, torn down)."""
    timestamp_ns = int(os.environ.get("ROOTCAUSE_TEST_TIMESTAMP_NS", DEFAULT_TIMESTAMP_NS))
    worker = os.environ.get("_F_WN", "worker-0")
    root = WorkerFailure(
        global_rank=1,
        local_rank=1,
        group_rank=0,
        worker=worker,
        host="host-a",
        pid=4242,
        exitcode=1,
        signal_number=None,
        exception_type="FlyteRecoverableException" if recoverable else "ZeroDivisionError",
        message=f"rank 1 on {worker} failed: division by zero",
        traceback="Traceback (most recent call last): ...",
        timestamp_ns=timestamp_ns,
        time_source=TimeSource.RECORDED,
        role=Role.CANDIDATE,
        recoverable=recoverable,
    )
    victim = WorkerFailure(
        global_rank=0,
        local_rank=0,
        group_rank=0,
        worker=worker,
        host="host-a",
        pid=4241,
        exitcode=-15,
        signal_number=15,
        exception_type=None,
        message="terminated by the agent",
        traceback="",
        timestamp_ns=timestamp_ns + 2_000_000,
        time_source=TimeSource.OBSERVED,
        role=Role.VICTIM,
        recoverable=True,
    )
    return [root, victim]


def raise_root_cause(recoverable: bool) -> None:
    ranked = failures(recoverable)
    message = f"[root cause] {ranked[0].message}"
    if recoverable:
        raise ElasticRootCauseRecoverableError(message, ranked)
    raise ElasticRootCauseError(message, ranked)


def wait_at_barrier() -> None:
    """Say "ready", then block until the test opens the FIFO for writing (all released at once).

    An alarm ends a writer whose launcher died, so no process is left waiting forever.
    """
    barrier = Path(os.environ["ROOTCAUSE_TEST_BARRIER_DIR"])
    (barrier / BARRIER_READY / str(os.getpid())).touch()
    signal.alarm(BARRIER_TIMEOUT_S)
    with open(barrier / BARRIER_FIFO, "rb"):
        pass
    signal.alarm(0)
