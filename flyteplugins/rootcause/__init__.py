"""flyteplugins-rootcause: Flyte 2 distributed PyTorch tasks that report their true root-cause failure.

.. code-block:: python

    import flyte
    from flyteplugins.rootcause import ElasticRootCause

    env = flyte.TaskEnvironment(name="train", plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=4))

    @env.task
    def train() -> float: ...

The public names are resolved on first use (PEP 562): the pod's console script
(:mod:`flyteplugins.rootcause.runtime`) must note the kubelet's SIGTERM before anything imports
torch or flyte, and it lives in this package. Any public name loads the task module first, which
registers the task class for the config (Flyte 2 looks it up by the config's exact type), so the
config is only ever reachable from here with its task type registered.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The module that registers the task type (``TaskPluginRegistry.register``), loaded before any name.
_TASK_MODULE = "flyteplugins.rootcause.task"

_EXPORTS = {
    "AgentHungError": "flyteplugins.rootcause.exceptions",
    "ElasticRootCause": "flyteplugins.rootcause.config",
    "ElasticRootCauseError": "flyteplugins.rootcause.exceptions",
    "ElasticRootCauseRecoverableError": "flyteplugins.rootcause.exceptions",
    "RootCauseTorchFunctionTask": _TASK_MODULE,
    "StragglerCheck": "rootcause_engine.straggler.settings",
    "StragglerDetectedError": "flyteplugins.rootcause.straggler",
    "Workload": "rootcause_engine.straggler.settings",
}

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

if TYPE_CHECKING:
    from flyteplugins.rootcause.config import ElasticRootCause
    from flyteplugins.rootcause.exceptions import (
        AgentHungError,
        ElasticRootCauseError,
        ElasticRootCauseRecoverableError,
    )
    from flyteplugins.rootcause.straggler import StragglerDetectedError
    from flyteplugins.rootcause.task import RootCauseTorchFunctionTask
    from rootcause_engine.straggler.settings import StragglerCheck, Workload


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(_TASK_MODULE)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
