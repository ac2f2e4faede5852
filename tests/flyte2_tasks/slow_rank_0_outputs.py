"""A Flyte 2 ``ElasticRootCause`` task whose rank-0 pod writes ``outputs.pb`` seconds after the launch.

Every pod leaves torch's exit barrier at once; rank 0's ``a0`` then converts its value and uploads
``outputs.pb``, and a pod without rank 0 writes nothing
(:func:`flyteplugins.rootcause.upstream.leave_outputs_to_rank_0`). A slow upload (a large value) is
what opens the window in which the other pod could exit 0 first: here rank 0's ``a0`` holds its value
for :data:`RANK_0_WRITE_DELAY_S` after ``execute`` (a sleep in the worker would hold every pod's
launch, in the exit barrier, instead). The task type is a test-only subclass, registered for a
test-only config type (Flyte 2 finds a task class by its config's exact type).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os

import flyte
from flyte._task import P, R
from flyte.extend import TaskPluginRegistry
from flyte.models import CLUSTERED_WORKER_ENV

from flyteplugins.rootcause import ElasticRootCause
from flyteplugins.rootcause.task import RootCauseTorchFunctionTask
from rootcause_harness.training_loop import run_training

#: How long rank 0's pod holds its value after ``execute`` before the runtime writes ``outputs.pb``:
#: longer than a pod's exit after its launch takes (the runtime's teardown, 1-2 s here).
RANK_0_WRITE_DELAY_S = 5.0
#: What rank 0 returns; rank ``r`` returns ``BASE + r``.
BASE = 100.0


@dataclasses.dataclass
class SlowRank0Outputs(ElasticRootCause):
    """``ElasticRootCause`` for :class:`SlowRank0OutputsTask` (no field of its own)."""


@dataclasses.dataclass(kw_only=True)
class SlowRank0OutputsTask(RootCauseTorchFunctionTask):
    """The pod that holds rank 0 (the one ``leave_outputs_to_rank_0`` did not mark as a nonzero-rank
    clustered worker) sleeps after ``execute``, before the runtime uploads its value."""

    async def execute(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result = await super().execute(*args, **kwargs)
        if CLUSTERED_WORKER_ENV not in os.environ:
            await asyncio.sleep(RANK_0_WRITE_DELAY_S)
        return result


TaskPluginRegistry.register(config_type=SlowRank0Outputs, plugin=SlowRank0OutputsTask)

two_pods = flyte.TaskEnvironment(
    name="slow_rank_0_outputs", plugin_config=SlowRank0Outputs(nnodes=2, nproc_per_node=1)
)


@two_pods.task
def each_rank_returns_its_own(base: float = BASE, steps: int = 1) -> float:
    run_training(steps)  # the simulator's training loop: it records which pod got which global rank
    return base + int(os.environ["RANK"])


#: A pod without rank 0 that waits less than rank 0's pod takes to write its outputs.
IMPATIENT_TIMEOUT_S = 1.0

impatient = flyte.TaskEnvironment(
    name="slow_rank_0_outputs_impatient",
    plugin_config=SlowRank0Outputs(nnodes=2, nproc_per_node=1, rank_0_outputs_timeout_s=IMPATIENT_TIMEOUT_S),
)


@impatient.task
def rank_0_outlasts_the_wait(base: float = BASE, steps: int = 1) -> float:
    run_training(steps)
    return base + int(os.environ["RANK"])
