"""The simulator's training loop with the collective timeout users run (30 minutes), workers forked.

A rank that hangs is then named only by the hang watch (``rootcause_engine.agent.hang_watch``), at
``hang_after_s``, long before any collective times out; a rank that computes or writes alone for
longer than that must not be named at all (``tests/scenarios/test_hang_watch_jobs.py``). The
``quick`` tasks set ``hang_after_s`` to :data:`QUICK_HANG_AFTER_S`: the rule is the same, the wait
shorter, for the cases whose subject is not the default's timing.
"""

from __future__ import annotations

from flytekit import task

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.training_loop import LONG_COLLECTIVE_TIMEOUT_S, run_training
from tests.start_method import START_METHOD

#: ``hang_after_s`` of the quick tasks (the settings accept 10 s and more).
QUICK_HANG_AFTER_S = 10.0


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD))
def forked_train_2x2_long_timeout(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=2, start_method=START_METHOD,
                                   hang_after_s=QUICK_HANG_AFTER_S))
def forked_train_2x2_long_timeout_quick_hang(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)


@task(task_config=ElasticRootCause(nnodes="1:2", nproc_per_node=2, max_restarts=1, restart_policy="soft",
                                   start_method=START_METHOD, hang_after_s=QUICK_HANG_AFTER_S))
def forked_soft_train_2x2_long_timeout_quick_hang(steps: int = 8) -> float:
    return run_training(steps, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)
