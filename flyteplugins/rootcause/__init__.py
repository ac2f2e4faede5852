"""flyteplugins-rootcause: Flyte 2 distributed PyTorch tasks that report their true root-cause failure.

.. code-block:: python

    import flyte
    from flyteplugins.rootcause import ElasticRootCause

    env = flyte.TaskEnvironment(name="train", plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=4))

    @env.task
    def train() -> float: ...

Importing the package registers the task class for the config (Flyte 2 looks it up by the config's
exact type), so the config is only ever reachable with its task type registered.
"""

from __future__ import annotations

from flyteplugins.rootcause.config import ElasticRootCause
from flyteplugins.rootcause.exceptions import (
    AgentHungError,
    ElasticRootCauseError,
    ElasticRootCauseRecoverableError,
)
from flyteplugins.rootcause.straggler import StragglerDetectedError
from flyteplugins.rootcause.task import RootCauseTorchFunctionTask
from rootcause_engine.straggler.settings import StragglerCheck, Workload

__all__ = [
    "AgentHungError",
    "ElasticRootCause",
    "ElasticRootCauseError",
    "ElasticRootCauseRecoverableError",
    "RootCauseTorchFunctionTask",
    "StragglerCheck",
    "StragglerDetectedError",
    "Workload",
]
