"""``ElasticRootCauseFunctionTask``: kfpytorch's elastic task that reports the true first failure.

It reuses kfpytorch's ``_execute`` unchanged and adds, around it:

1. the user's function is wrapped in :class:`RecordingTaskFunction`, so every worker records its
   exception with a nanosecond time, ranks and host (kfpytorch pickles or calls whatever
   ``_task_function`` holds, on both start methods: swapped for the launch by
   :func:`flytekitplugins_rootcause.upstream.kfpytorch.task_function_swapped`); the worker-side
   hooks (process settings, the straggler pre-check) run there first;
2. the launch is observed (:mod:`flytekitplugins_rootcause.agent.launch_observer`): every worker
   pid is watched for its exact exit, teardown start is noted, and teardown uses ``teardown_grace_s``
   instead of torch's 30 s;
3. the NCCL/process settings of :mod:`process_settings` are put in the agent's environment (where
   unset) for the launch, and the agent watchdog (:mod:`watchdog`) guards it;
4. when kfpytorch reports a failure, the failures of *all* workers of the last attempt are ranked
   with the shared rule and a timestamped ``ElasticRootCauseError`` (or its recoverable twin) is
   raised in its place. torch itself reports only the first failure its poll happened to find.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from flytekit.configuration import SerializationSettings
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.extend import TaskPlugins
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from flytekitplugins_rootcause.agent.death_watcher import DeathWatcher
from flytekitplugins_rootcause.agent.diagnosis.deck import publish_timeline_deck
from flytekitplugins_rootcause.agent.diagnosis.root_cause import agent_timeline, diagnose, root_cause_error
from flytekitplugins_rootcause.agent.launch_observer import LaunchObserver, observing_launch
from flytekitplugins_rootcause.agent.torch_log_format import exceptions_preformatted
from flytekitplugins_rootcause.agent.watchdog import AgentWatchdog, watchdog_settings
from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped
from flytekitplugins_rootcause.worker.process_settings import (
    WorkerProcessSettings,
    agent_environment,
    applied_environment,
    before_user_function,
)
from flytekitplugins_rootcause.worker.recorder import RecordingTaskFunction

__all__ = ["PATCHED_ENTRYPOINT", "ElasticRootCauseFunctionTask", "root_cause_error"]

logger = logging.getLogger(__name__)

#: Console script of the patched entrypoint (``flytekitplugins_rootcause.entrypoint.command``).
PATCHED_ENTRYPOINT = "pyflyte-rootcause-execute"


def _child_failed_error(exc: BaseException) -> ChildFailedError | None:
    """The ``ChildFailedError`` kfpytorch converted into ``exc`` (its value or its context)."""
    for candidate in (getattr(exc, "value", None), exc.__cause__, exc.__context__):
        if isinstance(candidate, ChildFailedError):
            return candidate
    return None


class ElasticRootCauseFunctionTask(PytorchElasticFunctionTask):
    """Runs like ``PytorchElasticFunctionTask``; on failure raises the root cause, timestamped."""

    task_config: ElasticRootCause

    def get_default_command(self, settings: SerializationSettings) -> list[str]:
        """flytekit's container args with ``pyflyte-execute`` swapped for the patched entrypoint."""
        command = super().get_default_command(settings)
        return [PATCHED_ENTRYPOINT if arg == "pyflyte-execute" else arg for arg in command]

    def _worker_hooks(self) -> list[Callable[[], None] | None]:
        """Picklable callables each worker runs, in order, before the user's function.

        Extend (``return [*super()._worker_hooks(), hook]``) to add one, e.g. the straggler
        pre-check; the process settings come first so the hooks after them see them applied.
        """
        hooks: list[Callable[[], None] | None] = [
            WorkerProcessSettings(collective_timeout_s=self.task_config.collective_timeout_s)
        ]
        if self.task_config.straggler_check is not None:
            from flytekitplugins_rootcause.straggler.worker import StragglerCheckHook

            hooks.append(StragglerCheckHook(self.task_config.straggler_check, nnodes=self.task_config.nnodes))
        return hooks

    def _before_user_function(self) -> Callable[[], None] | None:
        """The worker hooks as the single callable ``RecordingTaskFunction`` runs."""
        return before_user_function(self._worker_hooks())

    def _execute(self, **kwargs: Any) -> Any:
        recording = RecordingTaskFunction(self.task_function, self._before_user_function())
        settings = watchdog_settings(self.task_config)
        with task_function_swapped(self, recording), DeathWatcher() as watcher:
            observer = LaunchObserver(watcher, teardown_grace_s=self.task_config.teardown_grace_s)
            try:
                with (
                    applied_environment(agent_environment(self.task_config)),
                    exceptions_preformatted(),
                    observing_launch(observer),
                    AgentWatchdog(observer, settings) if settings else contextlib.nullcontext(),
                ):
                    return super()._execute(**kwargs)
            except (FlyteRecoverableException, FlyteUserRuntimeException) as exc:
                child_failed = _child_failed_error(exc)
                if child_failed is None:
                    raise
                failures = diagnose(observer, child_failed)
                if not failures:
                    logger.warning("no failed worker found in the launch; reporting torch's error as is")
                    raise
                error = root_cause_error(failures, note=agent_timeline(observer, failures))
                publish_timeline_deck(failures)
                logger.error("Root cause of the elastic launch failure:\n%s", error)
                raise error from None


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
