"""``ElasticRootCauseFunctionTask``: kfpytorch's elastic task that reports the true first failure.

It reuses kfpytorch's ``_execute`` unchanged and adds, around it:

1. the user's function is wrapped in :class:`RecordingTaskFunction`, so every worker records its
   exception with a nanosecond time, ranks and host (kfpytorch pickles or calls whatever
   ``_task_function`` holds, on both start methods: swapped for the launch by
   :func:`flytekitplugins_rootcause.upstream.kfpytorch.task_function_swapped`); the worker-side
   hooks (process settings, the straggler pre-check) run there first;
2. the launch is observed (:mod:`rootcause_engine.agent.launch_observer`): every worker
   pid is watched for its exact exit, teardown start is noted, and teardown uses ``teardown_grace_s``
   instead of torch's 30 s;
3. the NCCL/process settings of :mod:`process_settings` are put in the agent's environment (where
   unset) for the launch, and the agent watchdog (:mod:`watchdog`) guards it;
4. when kfpytorch reports a failure, the failures of *all* workers of the last attempt are ranked
   with the shared rule and a timestamped ``ElasticRootCauseError`` (or its recoverable twin) is
   raised in its place. torch itself reports only the first failure its poll happened to find;
5. the pods keep track of each other (:mod:`rootcause_engine.agent.peer_watch`): when only
   victims failed here, the report names the peer pods that are gone (a lost node leaves no error
   file of its own), and the error document carries the attempt's members and those lost peers;
6. with ``restart_policy="soft"``, torch's agent runs the soft-restart loop
   (:mod:`rootcause_engine.agent.soft_restart_agent`): a failure is diagnosed as above, and
   only the failed node's workers restart while the others pause; the final report lists every
   earlier failure the job went through.
"""

from __future__ import annotations

import contextlib
import dataclasses
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

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.deck import publish_restarts_deck, publish_timeline_deck
from flytekitplugins_rootcause.exceptions import root_cause_error
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT, RunsPatchedEntrypoint
from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped
from rootcause_core.safe_text import exception_summary
from rootcause_core.testimony import LostPeer
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger, diagnose
from rootcause_engine.agent.launch_observer import LaunchObserver, observing_launch
from rootcause_engine.agent.launch_record import record_launch
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.rendezvous_host import this_agent_hosts_rendezvous
from rootcause_engine.agent.soft_restart_agent import (
    SoftRestartLoop,
    SoftRestartSession,
    history_note,
    history_rows,
)
from rootcause_engine.agent.store_keeper import stores_kept
from rootcause_engine.agent.torch_log_format import exceptions_preformatted
from rootcause_engine.agent.watchdog import AgentWatchdog, watchdog_settings
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.upstream.torch_agent_loop import launcher_agent_with_loop
from rootcause_engine.worker.process_settings import (
    WorkerProcessSettings,
    agent_environment,
    applied_environment,
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
            from flytekitplugins_rootcause.straggler.worker import StragglerCheckHook

            hooks.append(StragglerCheckHook(self.task_config.straggler_check, nnodes=self.task_config.nnodes))
        return hooks

    def _before_user_function(self) -> Callable[[], None] | None:
        """The worker hooks as the single callable ``RecordingTaskFunction`` runs."""
        return before_user_function(self._worker_hooks())

    def _execute(self, **kwargs: Any) -> Any:
        recording = RecordingTaskFunction(self.task_function, self._before_user_function())
        settings = watchdog_settings(self.task_config)
        peers = PeerWatch(
            current_worker_name(),
            hosts_store=this_agent_hosts_rendezvous,
            silence_limit_s=self.task_config.lost_after_s,
            interval_s=self.task_config.heartbeat_interval_s,
        )
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
            if soft is not None:
                soft.watch_peers = peers.joined
            watchdog = AgentWatchdog(observer, settings, error_of=root_cause_error, peers=peers) if settings else None
            if soft is None:  # under soft restarts a peer's failure reaches this pod as a world change
                peers.when_a_peer_fails(lambda: _end_running_attempt(observer))
            peers.when_a_peer_is_lost(_LostPeerHandler(observer, peers, soft, watchdog))
            try:
                with (
                    applied_environment(agent_environment(self.task_config)),
                    _soft_restarts(soft),
                    exceptions_preformatted(),
                    observing_launch(observer, peers),
                    watchdog if watchdog is not None else contextlib.nullcontext(),
                ):
                    result = super()._execute(**kwargs)
                if soft is not None:
                    publish_restarts_deck(history_rows(soft))
                return result
            except (FlyteRecoverableException, FlyteUserRuntimeException) as exc:
                child_failed = _child_failed_error(exc)
                if child_failed is None:
                    raise
                # workers this pod ended because a silent peer was declared lost fail like any others
                trigger = Trigger.PEER_LOST if peers.declared_lost() else Trigger.WORKER_FAILED
                diagnosis = _diagnose_launch(observer, peers, soft, trigger, child_failed)
                if diagnosis is None:
                    raise
                raise _raised(diagnosis) from None
            except (RendezvousError, DistError) as exc:
                # torch's agent lost the rendezvous store (its host pod is gone) before it saw its
                # workers fail: diagnose the attempt all the same, if one was started
                if observer.last_attempt() is None:
                    raise
                note = f"The agent itself failed: {exception_summary(exc)}"
                diagnosis = _diagnose_launch(observer, peers, soft, Trigger.STORE_LOST, None, note)
                if diagnosis is None:
                    raise
                raise _raised(diagnosis) from None
            finally:
                peers.finish()
                peers.close()

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
            diagnose=lambda child_failed: _local_diagnosis(observer, child_failed),
            end_workers=lambda: _end_running_attempt(observer),
            timeout_s=self.task_config.soft_restart_timeout_s,
            min_nodes=int(self.min_nodes),
            max_nodes=int(self.max_nodes),
        )


@contextlib.contextmanager
def _soft_restarts(session: SoftRestartSession | None) -> Iterator[None]:
    """For a soft-restart launch: the workers find their channel, and torch's agent runs the soft loop."""
    if session is None:
        yield
        return
    with applied_environment(session.channel.environment()), launcher_agent_with_loop(SoftRestartLoop(session)):
        yield


def _local_diagnosis(observer: LaunchObserver, child_failed: ChildFailedError) -> Diagnosis | None:
    """The diagnosis of a failure a soft restart may heal (this pod's record only: the job goes on)."""
    return diagnose(record_launch(observer, child_failed), trigger=Trigger.SOFT_RESTART)


def _end_running_attempt(observer: LaunchObserver, *, probe: bool = True, grace_s: float | None = None) -> None:
    """Another pod's launch failed: end this pod's workers still running (probed first, as in any teardown).

    They could only fail as victims now; one that hangs would never fail at all, and this pod would
    hold the job until the operator deleted it, with no report of its own.
    """
    attempt = observer.last_attempt()
    if attempt is not None and observer.teardown_ns(attempt) is None:
        logger.warning("another pod's launch failed or was lost: ending this pod's workers of attempt %d", attempt)
        observer.end_workers(attempt, probe=probe, grace_s=grace_s)


#: SIGTERM to SIGKILL for workers ended because a peer pod is lost: they wait in a collective for a
#: pod that will never answer, so a SIGTERM handler of theirs (forked workers inherit the agent's)
#: cannot run, and the configured grace would only delay the report.
LOST_PEER_TEARDOWN_GRACE_S = 1.0

#: After a lost store host's verdict, how long torch's agent gets (beyond the teardown grace) to
#: report its failed workers before the watchdog reports for it: torch's monitor loop asks the
#: rendezvous store how many nodes wait, and that call never returns from a frozen store.
STORE_HOST_LOST_GRACE_S = 1.0


@dataclasses.dataclass
class _LostPeerHandler:
    """What this pod does when the peer watch declares peers lost while the job was healthy.

    Under soft restarts, while the store's host is not among them, the soft loop takes them out of
    the world and the survivors go on (it ends the job itself when too few nodes would be left).
    Otherwise (the hard policy, or the store gone with its host) this pod's workers are ended once.
    """

    observer: LaunchObserver
    peers: PeerWatch
    soft: SoftRestartSession | None
    watchdog: AgentWatchdog | None
    ended: bool = False

    def __call__(self, lost: tuple[LostPeer, ...]) -> None:
        hosts = {member.group_rank for member in self.peers.members() if member.hosts_store}
        if self.soft is not None and not any(peer.group_rank in hosts for peer in lost):
            self.soft.peers_lost(lost)
            return
        if not self.ended:
            self.ended = True
            _a_peer_is_lost(self.observer, lost, hosts, self.watchdog)


def _a_peer_is_lost(
    observer: LaunchObserver, lost: tuple[LostPeer, ...], hosts: set[int], watchdog: AgentWatchdog | None
) -> None:
    """Peers sent no heartbeat while the job was healthy: end this pod's workers (they fail as victims,
    and the report names the lost pods); if the store's host is among them, torch's agent may never
    return, so the watchdog reports for it after the teardown."""
    names = ", ".join(f"{peer.worker} (group rank {peer.group_rank})" for peer in lost)
    logger.error("peer pods lost while the job was healthy: %s; ending this pod's workers", names)
    _end_running_attempt(observer, probe=False, grace_s=LOST_PEER_TEARDOWN_GRACE_S)
    if watchdog is not None and any(peer.group_rank in hosts for peer in lost):
        why = (
            f"The pod that hosts the rendezvous store, {names}, sent no heartbeat and its store stopped "
            "answering: torch's agent waits on that store for ever, so the agent watchdog reported for it."
        )
        watchdog.expedite(why, within_s=LOST_PEER_TEARDOWN_GRACE_S + STORE_HOST_LOST_GRACE_S)


def _diagnose_launch(
    observer: LaunchObserver,
    peers: PeerWatch,
    soft: SoftRestartSession | None,
    trigger: Trigger,
    child_failed: ChildFailedError | None,
    *notes: str,
) -> Diagnosis | None:
    """The pipeline's diagnosis of the launch's last attempt, with the peers and the soft restarts
    the job went through before; ``None`` when no worker failed (torch's error is raised as is)."""
    if soft is not None and (earlier := history_note(soft)):
        notes = (*notes, earlier)
    return diagnose(
        record_launch(observer, child_failed),
        trigger=trigger,
        peers=peers,
        notes=notes,
        restarts=history_rows(soft) if soft is not None else (),
    )


def _raised(diagnosis: Diagnosis) -> Exception:
    """The task's exception for ``diagnosis``, after its Deck is published and its report logged."""
    error = root_cause_error(diagnosis)
    publish_timeline_deck(diagnosis)
    logger.error("Root cause of the elastic launch failure:\n%s", diagnosis.report)
    return error


TaskPlugins.register_pythontask_plugin(ElasticRootCause, ElasticRootCauseFunctionTask)
