"""One observed elastic launch: every observer the engine puts around torch's agent, and its diagnosis.

Why: both front-ends (flytekit's and Flyte 2's) run torch elastic's launch the same way. Only how
they call it and what they make of the diagnosis differ. The order in which the observers are
entered matters, so it exists once, here. :class:`LaunchSession` holds the observers for the launch.
:meth:`LaunchSession.running` wraps the launch call itself. After the launch raised, one method runs
the one diagnosis pipeline on the last attempt. The order, step by step: ``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from rootcause_core.pod_stop import POD_STOP, PodStopNotice
from rootcause_core.safe_text import exception_summary
from rootcause_core.testimony import LostPod
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent import termination
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.hang import HangVerdict
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, RestartRow, Trigger, diagnose
from rootcause_engine.agent.diagnosis.pod_failures import (
    rendezvous_failure,
    stop_failure,
)
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch, hang_settings, hang_watch_running
from rootcause_engine.agent.isolation_gate import ContactBoard
from rootcause_engine.agent.launch_observer import LaunchObserver, observing_launch
from rootcause_engine.agent.launch_record import record_launch
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.rendezvous_host import this_agent_hosts_store
from rootcause_engine.agent.soft_restart_agent import (
    SoftRestartLoop,
    SoftRestartSession,
    history_note,
    history_rows,
)
from rootcause_engine.agent.soft_world import STORE_TIMEOUT_S
from rootcause_engine.agent.store_keeper import KeptStores, stores_kept
from rootcause_engine.agent.torch_log_format import exceptions_preformatted
from rootcause_engine.agent.watchdog import AgentWatchdog, WatchdogSettings, launch_watch, watchdog_settings
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.thread_guard import GuardedLoop
from rootcause_engine.upstream.readiness import PatchesNotApplied
from rootcause_engine.upstream.torch_agent_loop import launcher_agent_with_loop
from rootcause_engine.worker.process_settings import applied_environment

logger = logging.getLogger(__name__)

#: Where the training operator puts the rendezvous endpoint (both front-ends hand it to torch).
RENDEZVOUS_ENDPOINT_VARIABLE = "PET_RDZV_ENDPOINT"

#: SIGTERM to SIGKILL for workers ended because a peer pod is lost: they wait in a collective for a
#: pod that will never answer, so a SIGTERM handler of theirs (forked workers inherit the agent's)
#: cannot run, and the configured grace would only delay the report.
LOST_POD_TEARDOWN_GRACE_S = 1.0

#: After a lost store host's verdict, how long torch's agent gets (beyond the teardown grace) to
#: report its failed workers before the watchdog reports for it: torch's monitor loop asks the
#: rendezvous store how many nodes wait, and that call never returns from a frozen store.
STORE_HOST_LOST_GRACE_S = 1.0


@dataclasses.dataclass(frozen=True)
class LaunchSettings:
    """What the engine needs to know of a launch (each front-end fills it from its own config)."""

    teardown_grace_s: float
    hang_probe: bool
    lost_after_s: float | None
    heartbeat_interval_s: float
    #: ``"hard"`` (torch's) or ``"soft"`` (the soft-restart RFC's, :mod:`.soft_restart_agent`)
    restart_policy: str
    soft_restart_timeout_s: float
    min_nodes: int
    max_nodes: int
    start_method: str
    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_configs: Mapping[str, Any] | None
    #: the agent watchdog's settings; ``None``: no watchdog
    watchdog: WatchdogSettings | None
    #: variables set in the agent's environment for the launch where unset (``process_settings``)
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: which root causes the front-end's orchestrator retries (a soft restart heals only those)
    retry_rule: RetryRule = RetryRule.ON_REQUEST
    #: the hang watch's settings (:mod:`.hang_watch`); ``None``: no watch
    hang: HangSettings | None = None
    #: lines every diagnosis's report ends with (an upstream version outside the verified range:
    #: :mod:`rootcause_engine.upstream.readiness`), so the error the user reads says so
    notes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        config: Any,
        *,
        min_nodes: int,
        max_nodes: int,
        start_method: str,
        rdzv_backend: str,
        environment: Mapping[str, str],
        retry_rule: RetryRule = RetryRule.ON_REQUEST,
        notes: tuple[str, ...] = (),
    ) -> LaunchSettings:
        """The settings of either front-end's ``ElasticRootCause`` (both carry the root-cause fields
        and ``rdzv_configs``); the rendezvous endpoint is the one the training operator gives the pod."""
        return cls(
            teardown_grace_s=config.teardown_grace_s,
            hang_probe=config.hang_probe,
            lost_after_s=config.lost_after_s,
            heartbeat_interval_s=config.heartbeat_interval_s,
            restart_policy=config.restart_policy,
            soft_restart_timeout_s=config.soft_restart_timeout_s,
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            start_method=start_method,
            rdzv_backend=rdzv_backend,
            rdzv_endpoint=os.environ.get(RENDEZVOUS_ENDPOINT_VARIABLE, "localhost:0"),
            rdzv_configs=config.rdzv_configs,
            watchdog=watchdog_settings(config),
            environment=environment,
            retry_rule=retry_rule,
            hang=hang_settings(config),
            notes=notes,
        )


class LaunchSession:
    """The observers of one launch (the outer block of the module docstring); a context manager.

    ``error_of`` turns a diagnosis into the front-end's exception: the watchdog, which exits the
    process, hands that to the last-resort failure sink.
    """

    def __init__(
        self,
        settings: LaunchSettings,
        *,
        error_of: Callable[[Diagnosis], BaseException],
        pod_stop: PodStopNotice = POD_STOP,
        board: ContactBoard | None = None,
    ) -> None:
        """``board``: the task's output prefix in the object store, the isolation gate's third party
        (:mod:`.isolation_gate`); ``None`` in a local run."""
        self.settings = settings
        self.error_of = error_of
        self.peers = PeerWatch(
            current_worker_name(),
            hosts_store=this_agent_hosts_store,
            lost_after_s=settings.lost_after_s,
            interval_s=settings.heartbeat_interval_s,
            board=board,
        )
        self._stack = contextlib.ExitStack()
        #: the kubelet's SIGTERMs to this pod (:mod:`.termination`): the process's one notice
        self.termination = pod_stop
        self.observer: LaunchObserver | None = None
        self.soft: SoftRestartSession | None = None
        self.watchdog: AgentWatchdog | None = None
        self.hang_watch: HangWatch | None = None
        #: the launch's watch thread: the watchdog's looks and the hang watch's schedule (``None``: neither is on)
        self.launch_watch: GuardedLoop | None = None
        self._kept: KeptStores | None = None

    def __enter__(self) -> LaunchSession:
        settings = self.settings
        stack = self._stack.__enter__()
        try:
            self.termination.install()  # for good: see agent/termination.py
            stack.callback(self._finish_peers)
            self._kept = stack.enter_context(
                stores_kept(settings.start_method, settings.rdzv_backend, settings.rdzv_endpoint, settings.rdzv_configs)
            )
            watcher = stack.enter_context(DeathWatcher())
            channel_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="rootcause-soft-restart-"))
            self.observer = observer = LaunchObserver(
                watcher, teardown_grace_s=settings.teardown_grace_s, probe_before_teardown=settings.hang_probe
            )
            if settings.watchdog is not None or settings.hang is not None:
                self.launch_watch = launch_watch()  # one thread for both: see running()
            if settings.hang is not None:  # a hung rank's pod ends its workers, as for any failed one
                self.hang_watch = HangWatch(observer.ledger, self.peers, settings.hang,
                                            worker_name=current_worker_name(),
                                            on_hung=lambda _: end_running_attempt(observer), loop=self.launch_watch)
            self.soft = soft = self._soft_restart_session(observer, channel_dir)
            if soft is not None:
                soft.watch_peers = self.peers.joined
                self.peers.failed_pods_live_on = True
            if settings.watchdog is not None:
                self.watchdog = AgentWatchdog(
                    observer,
                    settings.watchdog,
                    error_of=self.error_of,
                    peers=self.peers,
                    retry_rule=settings.retry_rule,
                    loop=self.launch_watch,
                )
            if soft is None:  # under soft restarts a peer's failure reaches this pod as a world change
                self.peers.when_a_peer_fails(lambda: end_running_attempt(observer))
            self.peers.when_a_peer_is_lost(LostPodHandler(observer, self.peers, soft, self.watchdog))
        except BaseException:
            self._hand_stores_over()  # the front-end runs upstream's launch next
            self._stack.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if exc_type is not None and issubclass(exc_type, PatchesNotApplied):
            self._hand_stores_over()
        return self._stack.__exit__(exc_type, exc, tb)

    def _hand_stores_over(self) -> None:
        """Upstream's launch runs next in this pod (a patch raised): the rendezvous store's keeper stays,
        as a peer may already be connected to it (:meth:`.store_keeper.KeptStores.hand_over`)."""
        if self._kept is not None:
            self._kept.hand_over()

    def _finish_peers(self) -> None:
        self.peers.finish()
        self.peers.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[LaunchObserver]:
        """The block that calls torch's launch (the inner block of the module docstring)."""
        observer = self._observer()
        with (
            applied_environment(self.settings.environment),
            _soft_restarts(self.soft),
            exceptions_preformatted(),
            observing_launch(observer, self.peers),
            _running(self.launch_watch, self._launch_watch_stop_s()),
            self.watchdog if self.watchdog is not None else contextlib.nullcontext(),
            termination.armed(self.termination),
            hang_watch_running(self.hang_watch),
        ):
            yield observer

    def _launch_watch_stop_s(self) -> float:
        """How long the launch's watch thread is waited for at the end: its longest step's bound."""
        settings = self.settings
        return max(settings.watchdog.interval_s + 1 if settings.watchdog is not None else 0.0,
                   settings.hang.interval_s + 5 if settings.hang is not None else 0.0)

    def restarts(self) -> tuple[RestartRow, ...]:
        """The soft restarts the job went through (none under hard restarts)."""
        return tuple(history_rows(self.soft)) if self.soft is not None else ()

    def workers_failed(self, child_failed: ChildFailedError) -> Diagnosis | None:
        """The diagnosis after torch reported failed workers; ``None`` when the record holds no failure.

        Workers this pod ended because a silent peer was declared lost fail like any others; the
        trigger says which road it was.
        """
        return self._diagnose(self._failure_trigger(), child_failed)

    def agent_failed(self, error: BaseException) -> Diagnosis | None:
        """The diagnosis after torch's agent raised something other than its report of failed workers;
        ``None`` when the record holds no failure (the error is then the agent's own, raised as is).

        Why: torch builds that report from each failure's exit code, and a worker another process
        reaped has none (``multiprocessing`` reads ``None``): formatting the report then raises a
        ``TypeError`` in place of the ``ChildFailedError``. Seen at 8 pods under load, in the pod
        whose worker failed first; its pod must still write the job's root cause, not that error.
        """
        return self._diagnose(self._failure_trigger(), None, f"torch's agent failed: {exception_summary(error)}")

    def _failure_trigger(self) -> Trigger:
        """How this pod's workers came to fail: ended for lost pods, named hung, or failed."""
        trigger = Trigger.POD_LOST if self._ended_for_lost_pods() else Trigger.WORKER_FAILED
        if trigger is Trigger.WORKER_FAILED and self._hung():
            trigger = Trigger.HUNG_RANK
        return trigger

    def _ended_for_lost_pods(self) -> bool:
        """This pod's workers were ended because peers were declared lost: always under hard restarts;
        under soft ones only for the store's host (any other lost pod the world went on without)."""
        lost = self.peers.lost_pods.declared()
        if not lost or self.soft is None:
            return bool(lost)
        hosts = store_host_ranks(self.peers)
        return any(peer.group_rank in hosts for peer in lost)

    def store_lost(self, error: BaseException) -> Diagnosis:
        """The diagnosis after torch's agent failed in the rendezvous (it lost the store, whose host pod
        is gone; it timed out; it found the rendezvous closed) before it saw its workers fail: the last
        attempt's failed workers, or, where none was started or none failed, the pod's own failure in
        the rendezvous, a victim's (:func:`~.diagnosis.pod_failures.rendezvous_failure`)."""
        started = self._observer().ledger.last_attempt() is not None
        if started:
            diagnosis = self._diagnose(Trigger.STORE_LOST, None, f"The agent itself failed: {exception_summary(error)}")
            if diagnosis is not None:
                return diagnosis
        own = rendezvous_failure(error, workers_started=started, endpoint=self.settings.rdzv_endpoint)
        lost = self._diagnose(Trigger.STORE_LOST, None, pod_failures=(own,))
        assert lost is not None  # a pod failure is a failure
        return lost

    def stopped(self) -> Diagnosis | None:
        """The diagnosis after the kubelet's SIGTERM ended the launch (torch's ``SignalException``):
        this pod's stop is the root cause, recoverable, at the moment the signal came; its workers,
        ended by torch's agent, are victims. ``None`` when no SIGTERM was received (another signal)."""
        received = self.termination.received_ns
        if received is None:
            return None
        observer = self._observer()
        attempt = observer.ledger.last_attempt()
        ranks = [w.global_rank for w in observer.ledger.workers_of(attempt)] if attempt is not None else []
        first_rank = min((rank for rank in ranks if rank is not None), default=None)
        stop = stop_failure(received, first_rank=first_rank, signals=self.termination.count)
        return self._diagnose(Trigger.STOPPED, None, pod_failures=(stop,))

    def _diagnose(
        self,
        trigger: Trigger,
        child_failed: ChildFailedError | None,
        *notes: str,
        pod_failures: tuple[WorkerFailure, ...] = (),
    ) -> Diagnosis | None:
        soft = self.soft
        if soft is not None and (earlier := history_note(soft)):
            notes = (*notes, earlier)
        notes = (*notes, *self.settings.notes, *self._thread_notes())
        return diagnose(
            record_launch(self._observer(), child_failed),
            trigger=trigger,
            peers=self.peers,
            notes=notes,
            restarts=self.restarts(),
            retry_rule=self.settings.retry_rule,
            pod_failures=pod_failures,
            hung=self._hung(),
        )

    def _thread_notes(self) -> tuple[str, ...]:
        """What this pod's own watchers lost to errors nobody expected (:mod:`rootcause_engine.thread_guard`):
        a look that failed, or a thread that died, said in the report rather than left silent."""
        owners = (self.watchdog, self.hang_watch, self.observer.watcher if self.observer is not None else None)
        return tuple(note for owner in owners if owner is not None and (note := owner.note()))

    def _hung(self) -> dict[int, HangVerdict]:
        """The ranks the hang watch named (by pid), for the diagnosis."""
        return self.hang_watch.found() if self.hang_watch is not None else {}

    def _observer(self) -> LaunchObserver:
        if self.observer is None:
            raise RuntimeError("the launch session is used outside its block")
        return self.observer

    def _soft_restart_session(self, observer: LaunchObserver, channel_dir: str) -> SoftRestartSession | None:
        """What the soft-restart loop needs from this launch; ``None`` under torch's hard restarts."""
        settings = self.settings
        if settings.restart_policy != "soft":
            return None
        return SoftRestartSession(
            worker=current_worker_name(),
            channel=WorkerChannel(channel_dir),
            diagnose=lambda child_failed: local_diagnosis(observer, child_failed, settings.retry_rule, self._hung()),
            end_workers=lambda: end_running_attempt(observer),
            timeout_s=settings.soft_restart_timeout_s,
            min_nodes=settings.min_nodes,
            max_nodes=settings.max_nodes,
            # the world's store calls wait as long as the peer watch's: a frozen store host is then
            # given up on by both at the same time
            store_timeout_s=settings.lost_after_s or STORE_TIMEOUT_S,
        )


@contextlib.contextmanager
def _running(loop: GuardedLoop | None, stop_timeout_s: float) -> Iterator[None]:
    """``loop`` runs for the block (nothing when there is none); waited for up to ``stop_timeout_s`` after."""
    if loop is None:
        yield
        return
    loop.start()
    try:
        yield
    finally:
        loop.stop(stop_timeout_s)


#: What a stopped pod's failure says (the report's first line ends with it).
@contextlib.contextmanager
def _soft_restarts(session: SoftRestartSession | None) -> Iterator[None]:
    """For a soft-restart launch: the workers find their channel, and torch's agent runs the soft loop."""
    if session is None:
        yield
        return
    with applied_environment(session.channel.environment()), launcher_agent_with_loop(SoftRestartLoop(session)):
        yield


def local_diagnosis(
    observer: LaunchObserver,
    child_failed: ChildFailedError,
    retry_rule: RetryRule = RetryRule.ON_REQUEST,
    hung: Mapping[int, HangVerdict] | None = None,
) -> Diagnosis | None:
    """The diagnosis of a failure a soft restart may heal (this pod's record only: the job goes on);
    ``hung``: the ranks the hang watch named (a hung node is healed like a failed one)."""
    return diagnose(record_launch(observer, child_failed), trigger=Trigger.SOFT_RESTART, retry_rule=retry_rule,
                    hung=hung or {})


def end_running_attempt(observer: LaunchObserver, *, probe: bool = True, grace_s: float | None = None) -> None:
    """Another pod's launch failed: end this pod's workers still running (probed first, as in any teardown).

    They could only fail as victims now; one that hangs would never fail at all, and this pod would
    hold the job until the operator deleted it, with no report of its own.
    """
    attempt = observer.ledger.last_attempt()
    if attempt is not None and observer.ledger.teardown_of(attempt).began_ns is None:
        logger.warning("another pod's launch failed or was lost: ending this pod's workers of attempt %d", attempt)
        observer.teardown.end_workers(attempt, probe=probe, grace_s=grace_s)


@dataclasses.dataclass
class LostPodHandler:
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

    def __call__(self, lost: tuple[LostPod, ...]) -> None:
        hosts = store_host_ranks(self.peers)
        # a lost link is no lost pod: both ends live, and two worlds going on alone would split the job
        if self.soft is not None and not any(peer.group_rank in hosts or peer.link_with for peer in lost):
            self.soft.peers_lost(lost)
            return
        if not self.ended:
            self.ended = True
            a_peer_is_lost(self.observer, lost, hosts, self.watchdog)


def store_host_ranks(peers: PeerWatch) -> set[int]:
    """The group ranks of the round's members that host the rendezvous store (one, once known)."""
    return {member.group_rank for member in peers.members() if member.hosts_store}


def a_peer_is_lost(
    observer: LaunchObserver, lost: tuple[LostPod, ...], hosts: set[int], watchdog: AgentWatchdog | None
) -> None:
    """Peers sent no heartbeat while the job was healthy: end this pod's workers (they fail as victims,
    and the report names the lost pods); if the store's host is among them, torch's agent may never
    return, so the watchdog reports for it after the teardown."""
    names = ", ".join(f"{peer.worker} (group rank {peer.group_rank})" for peer in lost)
    logger.error("peer pods lost while the job was healthy: %s; ending this pod's workers", names)
    end_running_attempt(observer, probe=False, grace_s=LOST_POD_TEARDOWN_GRACE_S)
    if watchdog is not None and any(peer.group_rank in hosts for peer in lost):
        why = (
            f"The pod that hosts the rendezvous store, {names}, sent no heartbeat and its store stopped "
            "answering: torch's agent waits on that store for ever, so the agent watchdog reported for it."
        )
        watchdog.expedite(why, within_s=LOST_POD_TEARDOWN_GRACE_S + STORE_HOST_LOST_GRACE_S)
