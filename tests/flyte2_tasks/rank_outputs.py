"""A Flyte 2 ``ElasticRootCause`` task whose ranks return different values, for the real ``a0`` entrypoint.

Only rank 0's value is the task's output; a pod without rank 0 must write neither ``outputs.pb`` nor
``error.pb`` (every pod shares the action's output prefix).
"""

from __future__ import annotations

import os

import flyte

from flyteplugins.rootcause import ElasticRootCause

#: What rank 0 returns; rank ``r`` returns ``BASE + r``.
BASE = 100.0

two_pods = flyte.TaskEnvironment(name="rank_outputs", plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=1))


@two_pods.task
def each_rank_returns_its_own(base: float = BASE) -> float:
    return base + int(os.environ["RANK"])
