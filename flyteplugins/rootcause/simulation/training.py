"""The Flyte 2 training tasks the simulator runs (the loop: ``rootcause_engine.simulation.training_loop``).

Module-level tasks, one per job shape and config, because a pod loads its task by module and name
(Flyte 2's default resolver), as on a cluster. Each shape has this plugin's task and upstream
``flyteplugins.pytorch.Elastic``'s on the same training, for the benchmark's side-by-side runs.
``max_restarts=0``: a failure ends the job (what the accuracy runs measure).
"""

from __future__ import annotations

import flyte
from flyteplugins.pytorch import Elastic

from flyteplugins.rootcause import ElasticRootCause
from rootcause_engine.simulation.training_loop import SHORT_COLLECTIVE_TIMEOUT_S, run_training


def _env(name: str, config: Elastic) -> flyte.TaskEnvironment:
    return flyte.TaskEnvironment(name=name, plugin_config=config)


rootcause_2x2 = _env("rootcause_2x2", ElasticRootCause(nnodes=2, nproc_per_node=2, max_restarts=0))
elastic_2x2 = _env("elastic_2x2", Elastic(nnodes=2, nproc_per_node=2, max_restarts=0))
rootcause_4x2 = _env("rootcause_4x2", ElasticRootCause(nnodes=4, nproc_per_node=2, max_restarts=0))
elastic_4x2 = _env("elastic_4x2", Elastic(nnodes=4, nproc_per_node=2, max_restarts=0))
rootcause_2x1 = _env("rootcause_2x1", ElasticRootCause(nnodes=2, nproc_per_node=1, max_restarts=0))


@rootcause_2x2.task
def train_2x2(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_2x2.task
def train_2x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@elastic_2x2.task
def train_2x2_elastic(steps: int = 8) -> float:
    return run_training(steps)


@elastic_2x2.task
def train_2x2_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@rootcause_4x2.task
def train_4x2(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_4x2.task
def train_4x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@elastic_4x2.task
def train_4x2_elastic(steps: int = 8) -> float:
    return run_training(steps)


@elastic_4x2.task
def train_4x2_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@rootcause_2x1.task(report=True)
def train_2x1(steps: int = 8) -> float:
    return run_training(steps)
