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
   raised in its place. torch itself reports only the first failure its poll happened to find;
5. the pods keep track of each other (:mod:`flytekitplugins_rootcause.agent.peer_watch`): when only
   victims failed here, the report names the peer pods that are gone (a lost node leaves no error
   file of its own), and the error document carries the attempt's members and those lost peers;
6. with ``restart_policy="soft"``, torch's agent runs the soft-restart loop
   (:mod:`flytekitplugins_rootcause.agent.soft_restart_agent`): a failure is diagnosed as above, and
   only the failed node's workers restart while the others pause; the final report lists every
   earlier failure the job went through.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from flytekit.extend import TaskPlugins
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask
from torch.distributed import DistError
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousError

from flytekitplugins_rootcause.agent.death_watcher import DeathWatcher
from flytekitplugins_rootcause.agent.diagnosis.deck import publish_restarts_deck, publish_timeline_deck
from flytekitplugins_rootcause.agent.diagnosis.evidence import gather_evidence
from flytekitplugins_rootcause.agent.diagnosis.hang import stalled_collective
from flytekitplugins_rootcause.agent.diagnosis.root_cause import (
    agent_timeline,
    diagnose,
    rank_evidence,
    root_cause_error,
)
from flytekitplugins_rootcause.agent.launch_observer import LaunchObserver, observing_launch
from flytekitplugins_rootcause.agent.peer_watch import PeerWatch
from flytekitplugins_rootcause.agent.rendezvous_host import this_agent_hosts_rendezvous
from flytekitplugins_rootcause.agent.soft_restart_agent import (
    SoftRestartLoop,
    SoftRestartSession,
    history_note,
    history_rows,
)
from flytekitplugins_rootcause.agent.store_keeper import stores_kept
from flytekitplugins_rootcause.agent.torch_log_format import exceptions_preformatted
from flytekitplugins_rootcause.agent.watchdog import AgentWatchdog, watchdog_settings
from flytekitplugins_rootcause.agent.worker_channel import WorkerChannel
from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT, RunsPatchedEntrypoint
from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped
from flytekitplugins_rootcause.upstream.torch_agent_loop import launcher_agent_with_loop
from flytekitplugins_rootcause.worker.process_settings import (
    WorkerProcessSettings,
    agent_environment,
    applied_environment,
    before_user_function,
)
from flytekitplugins_rootcause.worker.recorder import RecordingTaskFunction
from rootcause_core.ordering import Role
from rootcause_core.safe_text import exception_summary
from rootcause_core.worker_names import current_worker_name

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
            from flytekitplugins_rootcause.straggler.worker import StragglerCheckHook

            hooks.append(StragglerCheckHook(self.task_config.straggler_check, nnodes=self.task_config.nnodes))
        return hooks

    def _before_user_function(self) -> Callable[[], None] | None:
        """The worker hooks as the single callable ``RecordingTaskFunction`` runs."""
        return before_user_function(self._worker_hooks())

    def _execute(self, **kwargs: Any) -> Any:
        recording = RecordingTaskFunction(self.task_function, self._before_user_function())
        settings = watchdog_settings(self.task_config)
        peers = PeerWatch(current_worker_name(), hosts_store=this_agent_hosts_rendezvous)
        with (
            self._stores_kept(),
            task_function_swapped(self, recording),
            DeathWatcher() as watcher,
            tempfile.TemporaryDirectory(prefix="rootcause-soft-restart-") as channel_dir,
        ):
            observer = LaunchObserver(
                watcher,
                teardown_grace_s=self.task_config.teardown_grace_s,
                probe_before_teardown=self.task_config.hang_probe,
            )
            soft = self._soft_restart_session(observer, channel_dir)
            if soft is None:  # under soft restarts a peer's failure reaches this pod as a world change
                peers.when_a_peer_fails(lambda: _end_running_attempt(observer))
            try:
                with (
                    applied_environment(agent_environment(self.task_config)),
                    _soft_restarts(soft),
                    exceptions_preformatted(),
                    observing_launch(observer, peers),
                    AgentWatchdog(observer, settings) if settings else contextlib.nullcontext(),
                ):
                    result = super()._execute(**kwargs)
                if soft is not None:
                    publish_restarts_deck(history_rows(soft))
                return result
            except (FlyteRecoverableException, FlyteUserRuntimeException) as exc:
                child_failed = _child_failed_error(exc)
                error = None if child_failed is None else _root_cause_error(observer, peers, child_failed, soft=soft)
                if error is None:
                    raise
                raise error from None
            except (RendezvousError, DistError) as exc:
                # torch's agent lost the rendezvous store (its host pod is gone) before it saw its
                # workers fail: diagnose the attempt all the same, if one was started
                error = (
                    None if observer.last_attempt() is None else _root_cause_error(observer, peers, None, exc, soft)
                )
                if error is None:
                    raise
                raise error from None
            finally:
                peers.stop()

    def _stores_kept(self) -> contextlib.AbstractContextManager[Any]:
        """Forked workers: the stores torch would serve from this agent run in keepers (see :mod:`store_keeper`).

        Entered first, before the launch starts any thread; the endpoint is the one kfpytorch gives torch.
        """
        return stores_kept(
            self.task_config.start_method,
            self.rdzv_backend,
            os.environ.get("PET_RDZV_ENDPOINT", "localhost:0"),
            self.task_config.rdzv_configs,
        )

    def _soft_restart_session(self, observer: LaunchObserver, channel_dir: str) -> SoftRestartSession | None:
        """What the soft-restart loop needs from this launch; ``None`` under torch's hard restarts."""
        if self.task_config.restart_policy != "soft":
            return None
        return SoftRestartSession(
            worker=current_worker_name(),
            channel=WorkerChannel(channel_dir),
            diagnose=lambda child_failed: _local_root_cause(observer, child_failed),
            end_workers=lambda: _end_running_attempt(observer),
            is_recoverable=lambda error: isinstance(error, FlyteRecoverableException),
            timeout_s=self.task_config.soft_restart_timeout_s,
            min_nodes=int(self.min_nodes),
        )


@contextlib.contextmanager
def _soft_restarts(session: SoftRestartSession | None) -> Iterator[None]:
    """For a soft-restart launch: the workers find their channel, and torch's agent runs the soft loop."""
    if session is None:
        yield
        return
    with applied_environment(session.channel.environment()), launcher_agent_with_loop(SoftRestartLoop(session)):
        yield


def _local_root_cause(observer: LaunchObserver, child_failed: ChildFailedError) -> BaseException:
    """The root-cause error of a failure a soft restart may heal (this pod's evidence only: the job goes on)."""
    failures = diagnose(observer, child_failed)
    if not failures:
        return RuntimeError(f"a worker failed and left no evidence: {exception_summary(child_failed)}")
    return root_cause_error(failures, note=agent_timeline(observer, failures))


def _end_running_attempt(observer: LaunchObserver) -> None:
    """Another pod's launch failed: end this pod's workers still running (probed first, as in any teardown).

    They could only fail as victims now; one that hangs would never fail at all, and this pod would
    hold the job until the operator deleted it, with no report of its own.
    """
    attempt = observer.last_attempt()
    if attempt is not None and observer.teardown_ns(attempt) is None:
        logger.warning("another pod's launch failed: ending this pod's workers of attempt %d", attempt)
        observer.end_workers(attempt, probe=True)


def _root_cause_error(
    observer: LaunchObserver,
    peers: PeerWatch,
    child_failed: ChildFailedError | None,
    agent_error: BaseException | None = None,
    soft: SoftRestartSession | None = None,
) -> Exception | None:
    """The root-cause error for a failed launch; ``None`` when no worker failure was found.

    ``agent_error``: what ended torch's agent when it was not a worker failure (a lost store).
    ``soft``: the launch's soft-restart session, whose earlier failures the report lists.
    """
    evidence, teardown_ns = gather_evidence(observer, child_failed)
    # first: the other pods must not take this one for lost, and may need the collective it timed out in
    peers.announce_failure(stalled_collective(item.recorded for item in evidence))
    failures = rank_evidence(evidence, teardown_ns, peers.announced_stalls())
    if not failures:
        logger.warning("no failed worker found in the launch; reporting torch's error as is")
        return None
    # only victims here: was the peer that failed us lost with its whole pod?
    lost = peers.lost_peers() if failures[0].role == Role.VICTIM else ()
    peers.leave()  # last: a peer that outlives this pod's store would take it for lost
    note = agent_timeline(observer, failures)
    if agent_error is not None:
        note = f"The agent itself failed: {exception_summary(agent_error)}\n{note}"
    if soft is not None and (earlier := history_note(soft)):
        note = f"{note}\n{earlier}"
    error = root_cause_error(failures, note=note, members=peers.members(), lost_peers=lost)
    publish_timeline_deck(failures, history_rows(soft) if soft is not None else ())
    logger.error("Root cause of the elastic launch failure:\n%s", error)
    return error


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
