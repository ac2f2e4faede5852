"""The training tasks the flytekit simulator runs (the loop itself: ``rootcause_harness.training_loop``).

Module-level tasks, one per job shape and config, because a pod loads its task by module and
name (flytekit's default resolver), exactly as on a cluster.
"""

from __future__ import annotations

from flytekit import task
from flytekitplugins.kfpytorch import Elastic

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.faults import arm_agent_faults
from rootcause_harness.training_loop import LONG_COLLECTIVE_TIMEOUT_S, SHORT_COLLECTIVE_TIMEOUT_S, run_training

#: the faults that strike a pod's agent (a pod stopped in its rendezvous), armed where a pod loads this module
arm_agent_faults()

# One task per job shape and config; monitor_interval is left at each config's default (what a
# user gets). flytekit resolves a task by its function's name, hence one function each.


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2))
def train_2x2(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=Elastic(nnodes=2, nproc_per_node=2))
def train_2x2_elastic(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=1))
def train_2x1(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1))
def train_3x1(steps: int = 8) -> float:
    return run_training(steps)


# A rank that hangs: its peers time out in SHORT_COLLECTIVE_TIMEOUT_S. With 2 workers per pod the hung
# rank's own pod sees its local peer time out; with 1, only the other pods' failure announcements
# tell its agent that the job failed.


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2))
def train_2x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@task(task_config=Elastic(nnodes=2, nproc_per_node=2))
def train_2x2_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=3, nproc_per_node=1))
def train_3x1_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


# 4 pods x 2 workers: the same jobs on a wider rendezvous (benchmarks/e2e.py --nnodes 4).


@task(task_config=ElasticRootCause(nnodes=4, nproc_per_node=2))
def train_4x2(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=Elastic(nnodes=4, nproc_per_node=2))
def train_4x2_elastic(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=4, nproc_per_node=2))
def train_4x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@task(task_config=Elastic(nnodes=4, nproc_per_node=2))
def train_4x2_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


# 8 pods x 1 worker: the most pods this machine holds, each its own agent and store client.


@task(task_config=ElasticRootCause(nnodes=8, nproc_per_node=1))
def train_8x1(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=Elastic(nnodes=8, nproc_per_node=1))
def train_8x1_elastic(steps: int = 8) -> float:
    return run_training(steps)


@task(task_config=ElasticRootCause(nnodes=8, nproc_per_node=1))
def train_8x1_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@task(task_config=Elastic(nnodes=8, nproc_per_node=1))
def train_8x1_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


# The collective timeout users run (30 min, for the default group too): a hang is named by the hang
# watch (hang_after_s), long before any collective times out (benchmarks/hang_verdict.py).


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2))
def train_2x2_long_timeout(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=4, nproc_per_node=2))
def train_4x2_long_timeout(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=8, nproc_per_node=1))
def train_8x1_long_timeout(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)
