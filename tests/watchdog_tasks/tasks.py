"""Flyte tasks for the teardown, watchdog and process-settings tests (run through local execution).

They live in an importable module so that kfpytorch's ``spawn`` workers can unpickle them.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import torch.distributed as dist
from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import READY_FILE, error_file_of, touch, wait_for
from tests.start_method import START_METHOD

#: Grace period of the teardown task; the test checks the victim lived at least this long.
TEARDOWN_GRACE_S = 1.5
#: Collective timeout of the settings task (torch's default for gloo is 30 min).
COLLECTIVE_TIMEOUT_S = 2.0
#: Timeout of the settings task's start-up group: only a bound for a broken test.
STARTUP_TIMEOUT_S = 120
#: NCCL async error handling the settings task asks for (torch's agent would put 1 there).
ASYNC_ERROR_HANDLING = 3

REPORTED_VARIABLES = (
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
    "PYTHONUNBUFFERED",
)


def _rank() -> int:
    return int(os.environ["RANK"])


def _ignore_sigterm_and_linger(marker_dir: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    touch(os.path.join(marker_dir, READY_FILE))
    time.sleep(120)


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2, teardown_grace_s=TEARDOWN_GRACE_S))
def fails_while_peer_ignores_sigterm(marker_dir: str) -> int:
    """Rank 0 ignores SIGTERM; then rank 1 raises. Rank 0 must be SIGKILLed after the grace period."""
    if _rank() == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        raise RuntimeError("rank 1 failed while rank 0 ignores SIGTERM")
    _ignore_sigterm_and_linger(marker_dir)
    return _rank()


@task(
    task_config=ElasticRootCause(
        start_method=START_METHOD,
        nnodes=1,
        nproc_per_node=2,
        nccl_async_error_handling=ASYNC_ERROR_HANDLING,
        collective_timeout_s=COLLECTIVE_TIMEOUT_S,
    )
)
def reports_settings(marker_dir: str) -> dict[str, str]:
    """Rank 0 reports its environment and how a collective its peer never joins failed.

    The default group gets an explicit, generous timeout: its set-up waits for the slower rank to
    start, which on a busy machine can take longer than the short configured timeout. The group the
    test is about is created afterwards without a timeout, so the configured default must apply.
    """
    report = {name: os.environ.get(name, "<unset>") for name in REPORTED_VARIABLES}
    dist.init_process_group("gloo", timeout=timedelta(seconds=STARTUP_TIMEOUT_S))
    dist.barrier()  # both ranks are up: the new group's set-up does not wait for a slow start
    group = dist.new_group()  # no timeout: the configured default must apply
    done = os.path.join(marker_dir, "rank0-done")
    if _rank() != 0:
        wait_for(done)
        return report
    started = time.monotonic()
    try:
        dist.barrier(group=group)  # rank 1 never joins
        report["collective"] = "completed"
    except Exception as exc:
        report["collective"] = f"{type(exc).__name__} after {time.monotonic() - started:.1f} s: {exc}"
    touch(done)
    return report


@task(
    task_config=ElasticRootCause(
        start_method=START_METHOD,
        nnodes=1,
        nproc_per_node=3,
        monitor_interval=0.5,
        teardown_grace_s=1.0,
        agent_watchdog_interval_s=0.2,
        agent_hang_timeout_s=8.0,
    )
)
def dies_under_a_hung_agent(marker_dir: str) -> int:
    """Rank 1 raises first, rank 2 then aborts (SIGABRT), rank 0 lingers ignoring SIGTERM."""
    rank = _rank()
    if rank == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        raise ValueError("root cause on rank 1")
    if rank == 2:
        wait_for(error_file_of(1))
        os.abort()
    _ignore_sigterm_and_linger(marker_dir)
    return rank


@task(
    task_config=ElasticRootCause(
        start_method=START_METHOD,
        nnodes=1,
        nproc_per_node=2,
        monitor_interval=0.5,
        teardown_grace_s=1.0,
        agent_watchdog_interval_s=0.2,
        agent_hang_timeout_s=8.0,
    )
)
def fails_under_a_blind_agent(marker_dir: str) -> int:
    """Rank 1 raises once rank 0 lingers ignoring SIGTERM (run by ``blind_agent``)."""
    if _rank() == 1:
        wait_for(os.path.join(marker_dir, READY_FILE))
        raise ValueError("root cause on rank 1")
    _ignore_sigterm_and_linger(marker_dir)
    return _rank()
