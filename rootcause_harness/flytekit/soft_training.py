"""The flytekit tasks written for soft restarts (``restart_policy="soft"``), with an injectable failure.

The loop is :mod:`rootcause_harness.soft_training_loop`, with flytekit's exceptions: a
``FlyteRecoverableException`` for a failure a soft restart heals, a plain ``ValueError`` for one it
may not (``fail_fatal``). One task per job shape: a pod loads its task by module and name.
"""

from __future__ import annotations

import functools

from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness import soft_training_loop

run_soft_training = functools.partial(
    soft_training_loop.run_soft_training, recoverable_error=FlyteRecoverableException, fatal_error=ValueError
)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=2, restart_policy="soft",
                                   start_method="fork"))
def soft_train_2x2(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                   fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                   init_until_scale_down: bool = False, fail_fatal: bool = False) -> float:
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down, fail_fatal)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=2, restart_policy="soft"))
def soft_train_2x2_spawned(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                           fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                           init_until_scale_down: bool = False, fail_fatal: bool = False,
                           finish_after_scale_up: bool = False, loop: str = "helpers",
                           fail_kind: str = "raise", restart_init_s: float = 0.0) -> float:
    """``soft_train_2x2`` with kfpytorch's default start method (spawn), as users run it.
    ``restart_init_s``: a restarted worker's initialisation, on top of ``init_s``."""
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down, fail_fatal, fail_kind=fail_kind,
                             finish_after_scale_up=finish_after_scale_up, loop=loop, restart_init_s=restart_init_s)


@task(task_config=ElasticRootCause(nnodes="2:3", nproc_per_node=1, max_restarts=2, restart_policy="soft"))
def soft_train_3x1_spawned(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                           fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                           init_until_scale_down: bool = False, fail_kind: str = "raise",
                           finish_after_scale_up: bool = False, loop: str = "helpers",
                           restart_init_s: float = 0.0) -> float:
    """3 pods x 1 spawned worker (kfpytorch's default start method), ``nnodes="2:3"``."""
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down, fail_kind=fail_kind, finish_after_scale_up=finish_after_scale_up,
                             loop=loop, restart_init_s=restart_init_s)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=2, restart_policy="hard"))
def hard_train_2x2_spawned(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                           fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                           init_until_scale_down: bool = False, fail_kind: str = "raise") -> float:
    """torch's hard restarts with spawned workers (the benchmark's baseline)."""
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down, fail_kind=fail_kind)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=2, restart_policy="hard",
                                   start_method="fork"))
def hard_train_2x2(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                   fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                   init_until_scale_down: bool = False) -> float:
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=1, max_restarts=2, restart_policy="soft",
                                   start_method="fork", soft_restart_timeout_s=2.0))
def soft_train_2x1_short_timeout(steps: int = 12, init_s: float = 0.0, step_s: float = 0.05, fail_pod: str = "",
                                 fail_local_rank: int = 0, fail_step: int = 4, fail_again: bool = False,
                                 init_until_scale_down: bool = False) -> float:
    return run_soft_training(steps, init_s, step_s, fail_pod, fail_local_rank, fail_step, fail_again,
                             init_until_scale_down)
