"""Fault scenarios for the root-cause accuracy benchmark, each built as a pair of Flyte tasks.

Every scenario body runs under kfpytorch's ``Elastic`` and under ``ElasticRootCause`` with the same
settings, so the two are compared on identical faults. Ground truth is the rank the scenario
injects the first fault into. Lives in an importable module so spawned workers can unpickle it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from flytekit import task
from flytekitplugins.kfpytorch import Elastic

from flytekitplugins_rootcause import ElasticRootCause
from testbed.sync import error_file_of, wait_for


def _rank() -> int:
    return int(os.environ["RANK"])


def _linger() -> None:
    time.sleep(120)


def _train_until_fault(k: int, fault: Callable[[], None]) -> int:
    """All ranks allreduce in a loop, as a training step does; rank k faults after ~0.3 s.

    The survivors' next collective then fails because their peer is gone, as it does in real
    jobs: they are victims that raise (and leave error files) after the root cause died silently.
    """
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    dist.barrier()
    started = time.monotonic()
    while True:
        if _rank() == k and time.monotonic() - started > 0.3:
            fault()
        dist.all_reduce(torch.ones(1024))
        time.sleep(0.01)


def _sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sigkill(k: int) -> int:
    """(b) rank k is SIGKILLed (as by the OOM killer) during training; its peers' allreduce fails."""
    return _train_until_fault(k, _sigkill_self)


def sigabrt(k: int) -> int:
    """(c) rank k aborts (as the NCCL watchdog does) during training; its peers' allreduce fails."""
    return _train_until_fault(k, os.abort)


def two_errors_50ms(k: int) -> int:
    """(d) rank k raises; rank (k+1)%n raises 50 ms later, both within the same wall-clock second."""
    n = int(os.environ["WORLD_SIZE"])
    second = (k + 1) % n
    if _rank() == k:
        # start just after a second boundary so both failures share the second torch records
        time.sleep(1 - time.time() % 1 + 0.05)
        raise RuntimeError(f"first failure on rank {k}")
    if _rank() == second:
        wait_for(error_file_of(k))
        time.sleep(0.05)
        raise RuntimeError(f"second failure on rank {second}")
    _linger()
    return _rank()


def kill_then_collective(k: int) -> int:
    """(e) rank k is SIGKILLed; 1 s later its peer's allreduce fails because k is gone."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    dist.barrier()
    if _rank() == k:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1.0)
    dist.all_reduce(torch.ones(1))
    _linger()
    return _rank()


def succeed(x: int) -> int:
    return x + _rank()


def all_reduce_and_return(x: int) -> int:
    """Ends right after its last gloo collective, its group left alive (``benchmarks.gloo_exit_race``)."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    for _ in range(2):
        dist.all_reduce(torch.ones(1))
    return x + _rank()


def sleep_then_succeed(seconds: float) -> int:
    time.sleep(seconds)
    return _rank()


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    body: Callable[..., int]
    nproc: int
    settings: dict[str, Any]
    faulty_rank: int


SCENARIOS = [
    Scenario("b-sigkill", sigkill, 2, {}, 1),
    Scenario("c-sigabrt", sigabrt, 2, {}, 1),
    Scenario("d-50ms-same-second", two_errors_50ms, 3, {"monitor_interval": 2}, 2),
    Scenario("e-kill-then-collective", kill_then_collective, 2, {"monitor_interval": 3}, 1),
]


def _make_task(config_type: type, scenario: Scenario, suffix: str) -> Any:
    config = config_type(nnodes=1, nproc_per_node=scenario.nproc, **scenario.settings)
    body = scenario.body
    fn = task(task_config=config)(body)
    fn._name = f"{scenario.name}-{suffix}"
    return fn


ELASTIC_TASKS = {s.name: _make_task(Elastic, s, "elastic") for s in SCENARIOS}
ROOTCAUSE_TASKS = {s.name: _make_task(ElasticRootCause, s, "rootcause") for s in SCENARIOS}
MONITOR_TASKS = {
    interval: task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2, monitor_interval=interval))(
        sleep_then_succeed
    )
    for interval in (5.0, 0.5, 0.1)
}
SUCCESS_TASKS = {
    "Elastic (monitor 5 s)": task(task_config=Elastic(nnodes=1, nproc_per_node=2))(succeed),
    "ElasticRootCause (monitor 0.2 s)": task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2))(succeed),
}
ALL_REDUCE_AND_RETURN = task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=4))(all_reduce_and_return)
