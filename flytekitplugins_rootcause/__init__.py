"""flytekitplugins-rootcause: distributed PyTorch tasks that report their true root-cause failure.

.. code-block:: python

    from flytekitplugins_rootcause import ElasticRootCause

    @task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=4))
    def train() -> float: ...

flytekit imports this package at its own import time (entry point group ``flytekit.plugins``).
kfpytorch's ``task`` module runs ``import flytekit`` before it defines ``Elastic``, so this package
must not import kfpytorch (or torch) eagerly: the public names below are resolved on first use
(PEP 562), which also keeps ``import flytekit`` fast for users who never touch this plugin.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ElasticRootCause": "flytekitplugins_rootcause.config",
    "ElasticRootCauseError": "flytekitplugins_rootcause.exceptions",
    "ElasticRootCauseRecoverableError": "flytekitplugins_rootcause.exceptions",
    "ElasticRootCauseFunctionTask": "flytekitplugins_rootcause.task",
    "WorkerFailure": "rootcause_engine.agent.diagnosis.failures",
    "StragglerCheck": "rootcause_engine.straggler.settings",
    "StragglerDetectedError": "flytekitplugins_rootcause.straggler.exceptions",
    "StragglerPrecheck": "flytekitplugins_rootcause.straggler.task",
    "StragglerReport": "rootcause_engine.straggler.report",
}

__all__ = [
    "ElasticRootCause",
    "ElasticRootCauseError",
    "ElasticRootCauseFunctionTask",
    "ElasticRootCauseRecoverableError",
    "StragglerCheck",
    "StragglerDetectedError",
    "StragglerPrecheck",
    "StragglerReport",
    "WorkerFailure",
]

if TYPE_CHECKING:
    from flytekitplugins_rootcause.config import ElasticRootCause
    from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
    from flytekitplugins_rootcause.straggler.exceptions import StragglerDetectedError
    from flytekitplugins_rootcause.straggler.task import StragglerPrecheck
    from flytekitplugins_rootcause.task import ElasticRootCauseFunctionTask
    from rootcause_engine.agent.diagnosis.failures import WorkerFailure
    from rootcause_engine.straggler.report import StragglerReport
    from rootcause_engine.straggler.settings import StragglerCheck


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
