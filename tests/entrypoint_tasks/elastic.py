"""A real ``ElasticRootCause`` task: the agent launches two torch elastic workers in the pod."""

from __future__ import annotations

import os
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from tests.start_method import START_METHOD


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2, teardown_grace_s=2.0))
def rank_one_fails(x: int) -> int:
    """Rank 1 raises; rank 0 lingers until the agent tears it down (a victim)."""
    if int(os.environ["RANK"]) == 1:
        raise ValueError(f"bad batch {x} on rank 1")
    time.sleep(120)
    return x


@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=4))
def multi_node(x: int) -> int:
    """Serialized only: a two-pod PyTorchJob."""
    return x


@task(
    task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2, teardown_grace_s=2.0),
    enable_deck=True,
)
def rank_one_fails_with_deck(x: int) -> int:
    """As ``rank_one_fails``, with Flyte Decks on: the failure timeline is published."""
    if int(os.environ["RANK"]) == 1:
        raise ValueError(f"bad batch {x} on rank 1")
    time.sleep(120)
    return x
