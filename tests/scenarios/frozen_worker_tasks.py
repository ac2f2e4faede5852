"""A 2-pod x 2-worker training task whose training all-reduces time out after 8 s, workers forked.

Module-level, because a pod loads its task by module and name (flytekit's default resolver), as on a
cluster (``tests/scenarios/test_frozen_worker_jobs.py``).
"""

from __future__ import annotations

from flytekit import task

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.training_loop import COLLECTIVE_TIMEOUT_S, run_training
from tests.start_method import START_METHOD

#: The issue's collective timeout: far below ``hang_after_s`` (60 s), so the hang watch never judges.
EIGHT_SECOND_COLLECTIVE_TIMEOUT_S = 8


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD))
def forked_train_2x2_8s_timeout(steps: int = 8) -> float:
    return run_training(steps, EIGHT_SECOND_COLLECTIVE_TIMEOUT_S, COLLECTIVE_TIMEOUT_S)
