"""Twin tasks, one with kfpytorch's Elastic and one with ElasticRootCause, for serialization tests."""

from __future__ import annotations

from flytekit import task
from flytekitplugins.kfpytorch import Elastic, RunPolicy

from flytekitplugins_rootcause import ElasticRootCause
from flytekitplugins_rootcause.straggler import StragglerCheck, StragglerPrecheck, StragglerReport

SETTINGS = {"nnodes": 2, "nproc_per_node": 4, "max_restarts": 2, "run_policy": RunPolicy(backoff_limit=3)}


@task(task_config=Elastic(**SETTINGS))
def elastic_train(lr: float) -> float:
    return lr


@task(task_config=ElasticRootCause(**SETTINGS))
def rootcause_train(lr: float) -> float:
    return lr


@task(task_config=Elastic(nnodes=1, nproc_per_node=2))
def elastic_single(lr: float) -> float:
    return lr


@task(task_config=ElasticRootCause(nnodes=1, nproc_per_node=2))
def rootcause_single(lr: float) -> float:
    return lr


@task(task_config=StragglerPrecheck(nnodes=2, nproc_per_node=1, check=StragglerCheck(action="warn")))
def straggler_precheck() -> StragglerReport:
    """Body not run (StragglerPrecheck returns the check's report)."""
    ...
