"""``ElasticRootCauseFunctionTask``: kfpytorch's elastic task that reports the true first failure.

It reuses kfpytorch's ``_execute`` unchanged and adds three things around it:

1. the user's function is wrapped in :class:`RecordingTaskFunction`, so every worker records its
   exception with a nanosecond time, ranks and host (kfpytorch pickles or calls whatever
   ``_task_function`` holds, on both start methods);
2. the launch is observed (:mod:`launch_observer`): every worker pid is watched for its exact exit,
   teardown start is noted, and teardown uses ``teardown_grace_s``;
3. when kfpytorch reports a failure, the failures of *all* workers of the last attempt are ranked
   with the shared rule and a timestamped ``ElasticRootCauseError`` (or its recoverable twin) is
   raised in its place. torch itself reports only the first failure its poll happened to find.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from flytekit.configuration import SerializationSettings
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.extend import TaskPlugins
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.death_watcher import DeathWatcher
from flytekitplugins_rootcause.evidence import gather_evidence
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from flytekitplugins_rootcause.failures import WorkerFailure
from flytekitplugins_rootcause.launch_observer import LaunchObserver, observing_launch
from flytekitplugins_rootcause.report import format_root_cause_message
from flytekitplugins_rootcause.selection import is_recoverable, rank_failures
from flytekitplugins_rootcause.worker_recorder import RecordingTaskFunction, worker_name

logger = logging.getLogger(__name__)

#: Console script of the patched entrypoint (``flytekitplugins_rootcause.entrypoint``).
PATCHED_ENTRYPOINT = "pyflyte-rootcause-execute"


def _child_failed_error(exc: BaseException) -> ChildFailedError | None:
    """The ``ChildFailedError`` kfpytorch converted into ``exc`` (its value or its context)."""
    for candidate in (getattr(exc, "value", None), exc.__cause__, exc.__context__):
        if isinstance(candidate, ChildFailedError):
            return candidate
    return None


def root_cause_error(failures: list[WorkerFailure]) -> ElasticRootCauseError | ElasticRootCauseRecoverableError:
    """The exception to raise for ranked failures (root cause first)."""
    message = format_root_cause_message(failures)
    if is_recoverable(failures):
        return ElasticRootCauseRecoverableError(message, failures)
    return ElasticRootCauseError(message, failures)


class ElasticRootCauseFunctionTask(PytorchElasticFunctionTask):
    """Runs like ``PytorchElasticFunctionTask``; on failure raises the root cause, timestamped."""

    task_config: ElasticRootCause

    def get_default_command(self, settings: SerializationSettings) -> list[str]:
        """flytekit's container args with ``pyflyte-execute`` swapped for the patched entrypoint."""
        command = super().get_default_command(settings)
        return [PATCHED_ENTRYPOINT if arg == "pyflyte-execute" else arg for arg in command]

    def _before_user_function(self) -> Any:
        """Callable run in each worker before the user's function (the straggler pre-check)."""
        return None

    def _execute(self, **kwargs: Any) -> Any:
        user_function = self._task_function
        self._task_function = RecordingTaskFunction(user_function, self._before_user_function())
        try:
            with DeathWatcher() as watcher:
                observer = LaunchObserver(watcher, teardown_grace_s=self.task_config.teardown_grace_s)
                try:
                    with observing_launch(observer):
                        return super()._execute(**kwargs)
                except (FlyteRecoverableException, FlyteUserRuntimeException) as exc:
                    child_failed = _child_failed_error(exc)
                    if child_failed is None:
                        raise
                    evidence, teardown_ns = gather_evidence(observer, child_failed)
                    failures = rank_failures(
                        evidence, teardown_ns=teardown_ns, worker=worker_name(), host=socket.gethostname()
                    )
                    if not failures:
                        logger.warning("no failed worker found in the launch; reporting torch's error as is")
                        raise
                    error = root_cause_error(failures)
                    logger.error("Root cause of the elastic launch failure:\n%s", error)
                    raise error from None
        finally:
            self._task_function = user_function


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
