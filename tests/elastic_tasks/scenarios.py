"""Flyte tasks used by the real elastic-launch tests; each worker runs one fault scenario.

They live in an importable module so that workers could unpickle them under ``spawn``; they start
forked (``tests/start_method.py`` says why).
Scenarios synchronise through the file system or a gloo barrier, never through sleeps alone, so
the order of failures is the one the test asserts even on a loaded machine.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import error_file_of, wait_for
from tests.start_method import START_METHOD


def _rank() -> int:
    return int(os.environ["RANK"])


def _linger() -> None:
    """Survivors stay alive until the agent tears them down."""
    time.sleep(120)


# torch's default start method: a spawned survivor dies of the teardown's SIGTERM itself, while a forked
# one inherits the agent's SIGTERM handler and exits 1 with torch's SignalException instead.
@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=3, start_method="spawn"))
def rank_raises(k: int) -> int:
    if _rank() == k:
        raise ValueError(f"bad batch on rank {k}")
    _linger()
    return _rank()


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2))
def rank_sigkills_itself(k: int) -> int:
    if _rank() == k:
        os.kill(os.getpid(), signal.SIGKILL)
    _linger()
    return _rank()


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2))
def rank_aborts(k: int) -> int:
    if _rank() == k:
        os.abort()
    _linger()
    return _rank()


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=3, monitor_interval=2))
def two_raise_50ms_apart(first: int, second: int) -> int:
    """``first`` raises; ``second`` raises 50 ms after ``first`` has recorded its error."""
    rank = _rank()
    if rank == first:
        raise RuntimeError(f"first independent failure on rank {first}")
    if rank == second:
        wait_for(error_file_of(first))
        time.sleep(0.05)
        raise RuntimeError(f"second independent failure on rank {second}")
    _linger()
    return rank


@task(
    task_config=ElasticRootCause(
        start_method=START_METHOD, nnodes=1, nproc_per_node=2, monitor_interval=3, teardown_grace_s=30
    )
)
def killed_then_collective_error(k: int, j: int) -> int:
    """Rank k is SIGKILLed; 1 s later rank j's allreduce fails because its peer is gone."""
    if _rank() == j:
        # j must live to raise its collective error even if the agent's poll catches k's death
        # first and starts the teardown: it ignores SIGTERM, and the grace before SIGKILL is long
        # enough for a busy machine (the teardown ends as soon as j has exited, so it costs nothing)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    dist.barrier()
    if _rank() == k:
        os.kill(os.getpid(), signal.SIGKILL)
    if _rank() == j:
        time.sleep(1.0)
        dist.all_reduce(torch.ones(1))
    _linger()
    return _rank()


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2))
def rank_raises_recoverable(k: int) -> int:
    if _rank() == k:
        raise FlyteRecoverableException(f"spot capacity lost on rank {k}")
    _linger()
    return _rank()


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2))
def succeeds(x: int) -> dict[str, int]:
    return {"rank": _rank(), "x": x, "world": int(os.environ["WORLD_SIZE"])}
