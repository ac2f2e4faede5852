"""The Flyte 2 twin of ``frozen_worker_tasks``: a 2-pod x 2-worker task whose training all-reduces time
out after 8 s. Module-level: a pod loads its task by module and name (Flyte 2's default resolver)."""

from __future__ import annotations

import flyte

from flyteplugins.rootcause import ElasticRootCause
from rootcause_harness.training_loop import COLLECTIVE_TIMEOUT_S, run_training
from tests.scenarios.frozen_worker_tasks import EIGHT_SECOND_COLLECTIVE_TIMEOUT_S

rootcause_2x2_8s = flyte.TaskEnvironment(
    name="rootcause_2x2_8s", plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=2, max_restarts=0)
)


@rootcause_2x2_8s.task
def train_2x2_8s_timeout(steps: int = 8) -> float:
    return run_training(steps, EIGHT_SECOND_COLLECTIVE_TIMEOUT_S, COLLECTIVE_TIMEOUT_S)
