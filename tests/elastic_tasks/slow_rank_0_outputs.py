"""A flytekit ``ElasticRootCause`` task whose rank-0 pod writes ``outputs.pb`` seconds after the launch.

Every pod leaves torch's exit barrier at once; rank 0's pod then converts its value and uploads
``outputs.pb``, and a pod without rank 0 writes nothing (kfpytorch's ``IgnoreOutputs``). A slow
upload (a large value) is what opens the window in which the other pod could exit 0 first: here rank
0's pod holds its value for :data:`RANK_0_WRITE_DELAY_S` after its launch returned, in the pod's main
process (a sleep in the worker would hold every pod's launch, in the exit barrier, instead).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from flytekitplugins_rootcause import ElasticRootCause
from flytekitplugins_rootcause.task import ElasticRootCauseFunctionTask
from rootcause_harness.training_loop import run_training
from tests.start_method import START_METHOD

#: How long rank 0's pod holds its value after the launch before flytekit writes ``outputs.pb``:
#: longer than a pod's exit after its launch takes (flytekit's teardown, 1-2 s here).
RANK_0_WRITE_DELAY_S = 5.0
#: What rank 0 returns; rank ``r`` returns ``BASE + r``.
BASE = 100.0


class SlowRank0OutputsTask(ElasticRootCauseFunctionTask):
    """Only the pod holding rank 0 gets a value back from the launch (the others raise
    ``IgnoreOutputs`` from it): it sleeps before handing the value to flytekit."""

    def _execute(self, **kwargs: Any) -> Any:
        result = super()._execute(**kwargs)
        time.sleep(RANK_0_WRITE_DELAY_S)
        return result


def _slow_rank_0_outputs(function: Callable[..., float]) -> SlowRank0OutputsTask:
    """``@task``, with the slow task type (flytekit's default resolver finds it by the function's name)."""
    config = ElasticRootCause(nnodes=2, nproc_per_node=1, start_method=START_METHOD)
    return SlowRank0OutputsTask(task_config=config, task_function=function)


@_slow_rank_0_outputs
def each_rank_returns_its_own(base: float = BASE, steps: int = 1) -> float:
    run_training(steps)  # the simulator's training loop: it records which pod got which global rank
    return base + int(os.environ["RANK"])
