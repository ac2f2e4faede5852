"""The Flyte 2 training tasks the simulator runs (the loop: ``rootcause_harness.training_loop``).

Module-level tasks, one per job shape and config, because a pod loads its task by module and name
(Flyte 2's default resolver), as on a cluster. Each shape has this plugin's task and upstream
``flyteplugins.pytorch.Elastic``'s on the same training, for the benchmark's side-by-side runs.
``max_restarts=0``: a failure ends the job (what the accuracy runs measure), but for the tasks with
``Elastic``'s default (3 restarts, the fault recurring in each attempt) and the soft-restart task,
whose failure the job heals (``rootcause_harness.soft_training_loop``, with Flyte 2's
exceptions: a plain one is retried, ``NonRecoverableError`` is not).
"""

from __future__ import annotations

import flyte
from flyte.errors import NonRecoverableError
from flyteplugins.pytorch import Elastic

from flyteplugins.rootcause import ElasticRootCause, StragglerCheck
from rootcause_harness.faults import INJECTED_MESSAGE, arm_agent_faults
from rootcause_harness.soft_training_loop import run_soft_training
from rootcause_harness.training_loop import LONG_COLLECTIVE_TIMEOUT_S, SHORT_COLLECTIVE_TIMEOUT_S, run_training

#: the faults that strike a pod's agent (a pod stopped in its rendezvous), armed where a pod loads this module
arm_agent_faults()


def _env(name: str, config: Elastic) -> flyte.TaskEnvironment:
    return flyte.TaskEnvironment(name=name, plugin_config=config)


rootcause_2x2 = _env("rootcause_2x2", ElasticRootCause(nnodes=2, nproc_per_node=2, max_restarts=0))
elastic_2x2 = _env("elastic_2x2", Elastic(nnodes=2, nproc_per_node=2, max_restarts=0))
rootcause_4x2 = _env("rootcause_4x2", ElasticRootCause(nnodes=4, nproc_per_node=2, max_restarts=0))
elastic_4x2 = _env("elastic_4x2", Elastic(nnodes=4, nproc_per_node=2, max_restarts=0))
rootcause_8x1 = _env("rootcause_8x1", ElasticRootCause(nnodes=8, nproc_per_node=1, max_restarts=0))
elastic_8x1 = _env("elastic_8x1", Elastic(nnodes=8, nproc_per_node=1, max_restarts=0))
#: The same 2 x 2 jobs with ``Elastic``'s default ``max_restarts`` (3): a failure restarts every
#: worker three times before the job fails (the fault recurs at its step in every attempt).
rootcause_2x2_restarting = _env("rootcause_2x2_restarting", ElasticRootCause(nnodes=2, nproc_per_node=2))
elastic_2x2_restarting = _env("elastic_2x2_restarting", Elastic(nnodes=2, nproc_per_node=2))
rootcause_2x1 = _env("rootcause_2x1", ElasticRootCause(nnodes=2, nproc_per_node=1, max_restarts=0))
rootcause_3x1 = _env("rootcause_3x1", ElasticRootCause(nnodes=3, nproc_per_node=1, max_restarts=0))
rootcause_checked_2x1 = _env(
    "rootcause_checked_2x1",
    ElasticRootCause(nnodes=2, nproc_per_node=1, max_restarts=0, straggler_check=StragglerCheck()),
)
rootcause_soft_2x2 = _env(
    "rootcause_soft_2x2", ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=2, restart_policy="soft")
)


@rootcause_2x2.task
def train_2x2(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_2x2.task
def train_2x2_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@rootcause_2x2.task
def train_2x2_long_timeout(steps: int = 8) -> float:
    """The collective timeout users run (30 min): a hang is named by the hang watch, long before it."""
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)


@elastic_2x2.task
def train_2x2_elastic(steps: int = 8) -> float:
    return run_training(steps)


@elastic_2x2.task
def train_2x2_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@rootcause_2x2_restarting.task
def train_2x2_restarting(steps: int = 8) -> float:
    return run_training(steps)


@elastic_2x2_restarting.task
def train_2x2_elastic_restarting(steps: int = 8) -> float:
    return run_training(steps)


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


@rootcause_8x1.task
def train_8x1(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_8x1.task
def train_8x1_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@elastic_8x1.task
def train_8x1_elastic(steps: int = 8) -> float:
    return run_training(steps)


@elastic_8x1.task
def train_8x1_elastic_short_timeout(steps: int = 8) -> float:
    return run_training(steps, SHORT_COLLECTIVE_TIMEOUT_S)


@rootcause_2x1.task(report=True)
def train_2x1(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_3x1.task
def train_3x1(steps: int = 8) -> float:
    return run_training(steps)


@rootcause_2x1.task
def train_2x1_no_retry(steps: int = 8) -> float:
    """A user who forbids retries for this failure: the injected exception re-raised as Flyte 2's
    ``NonRecoverableError``, as a training loop that knows its data is bad would."""
    try:
        return run_training(steps)
    except RuntimeError as error:
        if INJECTED_MESSAGE not in str(error):
            raise  # a peer's failure (gloo's "connection closed"): not this worker's to judge
        raise NonRecoverableError(f"bad data, retrying cannot help: {error}") from error


#: The soft-restart job's shape: 24 steps of 0.15 s, the worker of local rank 0 of the second pod
#: failing at step 4 with a plain exception (what Flyte 2 retries).
SOFT_STEPS, SOFT_FAILING_POD, SOFT_FAIL_STEP = 24, "train-worker-1", 4


@rootcause_soft_2x2.task
def soft_train_2x2(steps: int = SOFT_STEPS) -> float:
    """2 pods x 2 spawned workers under soft restarts: the failed pod's workers restart, the others
    keep their processes through the scale-down and back up (a restarted worker loads its "model"
    until a survivor scaled down: the usual order, without a timing to break)."""
    return run_soft_training(
        steps, 0.0, 0.15, SOFT_FAILING_POD, 0, SOFT_FAIL_STEP, False, init_until_scale_down=True,
        finish_after_scale_up=True, recoverable_error=RuntimeError, fatal_error=NonRecoverableError,
    )


@rootcause_checked_2x1.task(report=True)
def train_2x1_checked(steps: int = 8) -> float:
    """2 pods x 1 worker that run the straggler pre-check (default settings) before training."""
    return run_training(steps)
