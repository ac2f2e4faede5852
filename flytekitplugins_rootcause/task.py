"""``ElasticRootCauseFunctionTask``: kfpytorch's elastic task that reports the true first failure.

torch reports only the first failure its poll happened to find, often a victim's. This task reuses
kfpytorch's ``_execute`` unchanged and wraps the engine's observers around it
(:class:`rootcause_engine.agent.launch_session.LaunchSession`, shared with Flyte 2's flavour). Every
worker records its exception with a nanosecond time. On failure, all workers' failures are ranked by
the shared rule, and a timestamped ``ElasticRootCauseError`` is raised instead. Before that, the pod
decides once whether the diagnosis can run on the installed upstream versions. If not, the plain
``Elastic`` training runs. ``docs/entrypoint.md`` lists the steps.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.extend import IgnoreOutputs, TaskPlugins
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask
from torch.distributed import DistError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousError

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.exceptions import RootCauseDetails, root_cause_error
from flytekitplugins_rootcause.rank_0_outputs import current_output_prefix, rank_0_outputs_awaited
from flytekitplugins_rootcause.report import publish_readiness_deck, publish_restarts_deck, publish_timeline_deck
from flytekitplugins_rootcause.upstream import task_readiness
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT, RunsPatchedEntrypoint
from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped
from rootcause_core.ordering import Role
from rootcause_core.pod_stop import POD_STOP
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.agreement import job_report
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.launch_session import LaunchSession, LaunchSettings
from rootcause_engine.upstream.readiness import PatchesNotApplied, Readiness, enter_all
from rootcause_engine.worker.process_settings import (
    WorkerProcessSettings,
    agent_environment,
    before_user_function,
)
from rootcause_engine.worker.recorder import RecordingTaskFunction

__all__ = ["PATCHED_ENTRYPOINT", "ElasticRootCauseFunctionTask", "root_cause_error"]

logger = logging.getLogger(__name__)

def _child_failed_error(exc: BaseException) -> ChildFailedError | None:
    """The ``ChildFailedError`` kfpytorch converted into ``exc`` (its value or its context)."""
    for candidate in (getattr(exc, "value", None), exc.__cause__, exc.__context__):
        if isinstance(candidate, ChildFailedError):
            return candidate
    return None


class ElasticRootCauseFunctionTask(RunsPatchedEntrypoint, PytorchElasticFunctionTask):
    """Runs like ``PytorchElasticFunctionTask``; on failure raises the root cause, timestamped."""

    task_config: ElasticRootCause

    def _worker_hooks(self) -> list[Callable[[], None] | None]:
        """Picklable callables each worker runs, in order, before the user's function.

        Extend (``return [*super()._worker_hooks(), hook]``) to add one, e.g. the straggler
        pre-check; the process settings come first so the hooks after them see them applied.
        """
        hooks: list[Callable[[], None] | None] = [
            WorkerProcessSettings(
                collective_timeout_s=self.task_config.collective_timeout_s, hang_probe=self.task_config.hang_probe
            )
        ]
        if self.task_config.straggler_check is not None:
            from flytekitplugins_rootcause.straggler.worker import straggler_check_hook

            hooks.append(straggler_check_hook(self.task_config.straggler_check, self.task_config.nnodes))
        return hooks

    def _before_user_function(self) -> Callable[[], None] | None:
        """The worker hooks as the single callable ``RecordingTaskFunction`` runs."""
        return before_user_function(self._worker_hooks())

    def _execute(self, **kwargs: Any) -> Any:
        readiness = task_readiness(self.task_config.restart_policy)
        if not readiness.diagnosis_on:
            return self._as_upstream(readiness, **kwargs)
        try:
            return self._observed_execute(readiness, **kwargs)
        except PatchesNotApplied as failed:
            readiness = readiness.turned_off(failed.reason)
        # outside the handler: upstream's own exceptions (kfpytorch's ``IgnoreOutputs`` too) are not
        # raised "during the handling" of the patch's, which would tell them apart from a plain launch's
        return self._as_upstream(readiness, **kwargs)

    def _observed_execute(self, readiness: Readiness, **kwargs: Any) -> Any:
        """kfpytorch's launch inside the engine's observers; raises :class:`PatchesNotApplied`
        (before any worker starts) when applying them failed."""
        readiness.announce()
        publish_readiness_deck(readiness)
        recording = RecordingTaskFunction(self.task_function, self._before_user_function())
        output = current_output_prefix()
        launch = LaunchSession(self._launch_settings(readiness), error_of=root_cause_error,
                               board=None if output is None else output.board())
        with contextlib.ExitStack() as session, contextlib.ExitStack() as patches:
            # a pod without rank 0 leaves only once rank 0's pod wrote outputs.pb (after the session)
            rank_0_outputs = rank_0_outputs_awaited(launch.peers, self.task_config.rank_0_outputs_timeout_s)
            enter_all(session, (rank_0_outputs, launch))
            try:
                # a SIGTERM that came before the launch raises here, to be diagnosed below
                enter_all(patches, (task_function_swapped(self, recording), launch.running()),
                          passthrough=(SignalException,))
                with patches.pop_all():
                    result = super()._execute(**kwargs)
                publish_restarts_deck(launch.restarts())
                return result
            except PatchesNotApplied:
                raise
            except (FlyteRecoverableException, FlyteUserRuntimeException) as exc:
                child_failed = _child_failed_error(exc)
                if child_failed is None:
                    raise
                diagnosis = launch.workers_failed(child_failed)
                if diagnosis is None:
                    raise
                raise self._raised(diagnosis, launch) from None
            except (RendezvousError, DistError) as exc:
                # torch's agent lost the rendezvous store (its host pod is gone) before it saw its
                # workers fail, or before they started: a victim's report, never a bare store error
                raise self._raised(launch.store_lost(exc), launch) from None
            except (IgnoreOutputs, SignalException):
                # IgnoreOutputs is kfpytorch's answer to torch's SignalException: a pod stopped by its
                # kubelet would exit 0 with nothing written, and the job would be Succeeded with no
                # error; SignalException itself: the pod was stopped before the launch started
                diagnosis = launch.stopped()
                if diagnosis is None:
                    raise  # a pod without rank 0 whose launch succeeded: rank 0's pod writes the outputs
                raise self._raised(diagnosis, launch) from None
            except Exception as exc:
                # torch's agent failed otherwise (its own report of the failed workers could not be
                # built): this pod's failed workers are still the diagnosis, if there are any
                diagnosis = launch.agent_failed(exc)
                if diagnosis is None:
                    raise
                raise self._raised(diagnosis, launch) from None

    def _as_upstream(self, readiness: Readiness, **kwargs: Any) -> Any:
        """kfpytorch's own launch of the user's own function: what plain ``Elastic`` runs (and the wait
        for rank 0's outputs), for a pod whose diagnosis is off (``readiness`` says why, in the log
        and the Deck)."""
        readiness.announce()
        publish_readiness_deck(readiness)
        POD_STOP.release()  # the kubelet's SIGTERM does what it does without the plugin
        # upstream's pod without rank 0 would exit 0 before rank 0's wrote outputs.pb, and the
        # operator's decision at that exit would find no outputs: it still waits for them
        with rank_0_outputs_awaited(None, self.task_config.rank_0_outputs_timeout_s):
            return super()._execute(**kwargs)

    def _raised(self, diagnosis: Diagnosis, launch: LaunchSession) -> Exception:
        """The exception for this pod's ``diagnosis``, with the pod the failing pods agreed on
        (``agent.agreement``, as Flyte 2 uses it): when the job's root cause is another pod's earlier,
        independent failure, this pod's document leaves the console's answer to that pod's, as a
        victim's does (``entrypoint.root_cause_wait``)."""
        agreed = job_report(diagnosis, launch.peers, worker=current_worker_name(),
                            timeout_s=self.task_config.agreement_timeout_s, retry_rule=launch.settings.retry_rule)
        own_candidate = bool(diagnosis.failures) and diagnosis.failures[0].role == Role.CANDIDATE
        lost = {peer.worker for peer in diagnosis.lost_pods}
        elsewhere = None
        if own_candidate and agreed is not None and agreed.worker not in (None, current_worker_name(), *lost):
            # another pod's earlier failure, whose pod writes its own document (a victim's document
            # and a lost pod's already leave the answer to the culprit's: they wait, or need not)
            elsewhere = agreed.worker
        return _raised(diagnosis, elsewhere)

    def _launch_settings(self, readiness: Readiness | None = None) -> LaunchSettings:
        """The engine's view of this task's config; ``readiness``'s warnings go in every report."""
        return LaunchSettings.of(
            self.task_config,
            min_nodes=int(self.min_nodes),
            max_nodes=int(self.max_nodes),
            start_method=self.task_config.start_method,
            rdzv_backend=self.rdzv_backend,
            environment=agent_environment(self.task_config),
            notes=readiness.lines if readiness is not None else (),
        )


def _raised(diagnosis: Diagnosis, agreed_worker: str | None = None) -> Exception:
    """The task's exception for ``diagnosis``, after its Deck is published and its report logged;
    ``agreed_worker``: the pod the failing pods agreed holds the job's root cause, if another one."""
    error = root_cause_error(diagnosis)
    if isinstance(error, RootCauseDetails) and agreed_worker is not None:
        error.agreed_worker = agreed_worker
    publish_timeline_deck(diagnosis)
    logger.error("Root cause of the elastic launch failure:\n%s", diagnosis.report)
    return error


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
