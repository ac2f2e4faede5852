"""The simulator's training loop as tasks whose workers start forked, for the PyTorchJob tests.

The product's own tasks (``rootcause_harness.flytekit.training``) spawn their workers, as
kfpytorch does by default; the README demo and ``benchmarks/e2e.py`` run those. A spawned worker
imports torch, flytekit and kfpytorch again (about 3.5 s of CPU here), so a 2-pod x 2-worker job
costs six interpreter start-ups; forked workers start with what their pod's agent imported, which
halves the CPU of each multi-pod test (``tests/start_method.py`` says why that matters and what
still runs spawned). The training loop, the fault injection and the pods are the same.
"""

from __future__ import annotations

import os
import time

from flytekit import task

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.faults import arm_agent_faults
from rootcause_harness.training_loop import (
    SHORT_COLLECTIVE_TIMEOUT_S,
    SHORT_INIT_TIMEOUT_S,
    run_training,
)
from tests.start_method import START_METHOD

#: the faults that strike a pod's agent (a pod stopped in its rendezvous), armed where a pod loads this module
arm_agent_faults()


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD))
def forked_train_2x2(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=1, start_method=START_METHOD))
def forked_train_2x1(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1, start_method=START_METHOD))
def forked_train_3x1(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD))
def forked_train_2x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1, start_method=START_METHOD))
def forked_train_3x1_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


# A rank that never reaches init_process_group: its peers wait SHORT_INIT_TIMEOUT_S for it there.


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD))
def forked_train_2x2_short_init(steps: int = 8) -> float:
    return run_training(steps, SHORT_INIT_TIMEOUT_S, SHORT_INIT_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1, start_method=START_METHOD))
def forked_train_3x1_short_init(steps: int = 8) -> float:
    return run_training(steps, SHORT_INIT_TIMEOUT_S, SHORT_INIT_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=1, start_method=START_METHOD))
def forked_train_2x1_rank0_saves(steps: int = 8, save_s: float = 8.0) -> float:
    """Rank 0 writes a final checkpoint (``save_s``) after training; the other pod waits for it in
    torch's exit barrier, longer than ``lost_after_s``."""
    loss = run_training(steps)
    if int(os.environ["RANK"]) == 0:
        time.sleep(save_s)
    return loss
