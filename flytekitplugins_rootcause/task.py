"""``ElasticRootCauseFunctionTask``: kfpytorch's elastic task that reports the true first failure."""

from __future__ import annotations

from typing import Any

from flytekit.configuration import SerializationSettings
from flytekit.extend import TaskPlugins
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from flytekitplugins_rootcause.config import ElasticRootCause

#: Console script of the patched entrypoint (``flytekitplugins_rootcause.entrypoint``).
PATCHED_ENTRYPOINT = "pyflyte-rootcause-execute"


class ElasticRootCauseFunctionTask(PytorchElasticFunctionTask):
    """Runs like ``PytorchElasticFunctionTask``; on failure raises the root cause, timestamped."""

    task_config: ElasticRootCause

    def get_default_command(self, settings: SerializationSettings) -> list[str]:
        """flytekit's container args with ``pyflyte-execute`` swapped for the patched entrypoint."""
        command = super().get_default_command(settings)
        return [PATCHED_ENTRYPOINT if arg == "pyflyte-execute" else arg for arg in command]

    def _execute(self, **kwargs: Any) -> Any:
        return super()._execute(**kwargs)


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
