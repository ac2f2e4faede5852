"""The chaos soak's tasks (``benchmarks/chaos_soak.py``): healthy 3- and 4-pod jobs that survive one
worker failure by torch's hard restart.

The loop is :mod:`rootcause_harness.soft_training_loop` under ``restart_policy="hard"``: ``steps``
all-reduces ``step_s`` apart; worker 0 of ``fail_pod`` raises once at ``fail_step`` (its restart
does not fail again), every worker of the job restarts and trains from step 0. ``max_restarts=2``:
one restart is used by the injected failure, one is spare. Where a pod imports this module, its
agent hands a restart's workers earlier workers' pids (:func:`~rootcause_harness.chaos.arm_pid_reuse`).
"""

from __future__ import annotations

from flytekit import task

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.chaos import arm_pid_reuse
from rootcause_harness.flytekit.soft_training import run_soft_training

arm_pid_reuse()


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1, max_restarts=2, restart_policy="hard"))
def chaos_train_3x1(steps: int = 12, step_s: float = 0.05, fail_pod: str = "", fail_step: int = 4) -> float:
    return run_soft_training(steps, 0.0, step_s, fail_pod, 0, fail_step, False)


@task(task_config=ElasticRootCause(nnodes=4, nproc_per_node=1, max_restarts=2, restart_policy="hard"))
def chaos_train_4x1(steps: int = 12, step_s: float = 0.05, fail_pod: str = "", fail_step: int = 4) -> float:
    return run_soft_training(steps, 0.0, step_s, fail_pod, 0, fail_step, False)
