"""One observed launch (``agent/launch_session.py``): its settings, its roads to a diagnosis, and what a pod
does when a peer pod is lost.

Real parts throughout: the session's own death watcher and peer watch, peers on a c10d ``TCPStore`` on
loopback (port 0), workers that are child processes of this one, the kubelet's SIGTERM as a real signal
to this process. The session is entered as both front-ends enter it; torch's launch itself is not run
(``tests/elastic_tasks`` and the front-ends' tests run whole launches). Nothing is timed but with bounds
no busy machine reaches, except where a watchdog must *not* fire (a wait past its deadline).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.distributed import DistStoreError, TCPStore
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from rootcause_core.ordering import Role, TimeSource
from rootcause_core.pod_stop import PodStopNotice
from rootcause_core.testimony import LostPod
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger
from rootcause_engine.agent.diagnosis.pod_failures import STOP_MESSAGE
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.launch_session import (
    LOST_POD_TEARDOWN_GRACE_S,
    RENDEZVOUS_ENDPOINT_VARIABLE,
    STORE_HOST_LOST_GRACE_S,
    LaunchSession,
    LaunchSettings,
    LostPodHandler,
    a_peer_is_lost,
)
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.soft_restart_agent import SoftRestartSession
from rootcause_engine.agent.watchdog import AGENT_HUNG_EXIT_CODE, AgentWatchdog, WatchdogSettings
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.upstream.torch_elastic import JoinedRound
from tests.rootcause_engine.agent.test_peer_watch import client, wait_for_members, watch

NEVER_S = 60.0
POD = "train-worker-0"
#: How long a healthy job's peer may be silent before it is declared lost (short: nothing here is slow
#: to beat, and a pod that never came never beats).
SILENCE_S = 1.0


@pytest.fixture(autouse=True)
def _this_pod(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process is pod ``POD``, which hosts no rendezvous store; its SIGTERM handler (which the
    session installs for good, as for a pod) is given back after each test."""
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", POD)
    monkeypatch.delenv(RENDEZVOUS_ENDPOINT_VARIABLE, raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def _settings(**changes: Any) -> LaunchSettings:
    settings = LaunchSettings(
        teardown_grace_s=30.0,
        hang_probe=False,
        lost_after_s=SILENCE_S,
        heartbeat_interval_s=0.05,
        restart_policy="hard",
        soft_restart_timeout_s=NEVER_S,
        min_nodes=1,
        max_nodes=3,
        start_method="spawn",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        rdzv_configs=None,
        watchdog=None,
    )
    return dataclasses.replace(settings, **changes)


def _error_of(diagnosis: Diagnosis) -> BaseException:
    return RuntimeError(diagnosis.report)


def _worker_process(code: str = "import time; time.sleep(600)") -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def _reap(*children: subprocess.Popen[bytes]) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()


def _until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + NEVER_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def _exited(watcher: DeathWatcher, pid: int) -> bool:
    return watcher.confirm_exit(pid) is not None


def _sigterm_to_this_process(pod_stop: PodStopNotice, count: int) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    _until(lambda: pod_stop.count >= count, f"SIGTERM {count} noted")


# --- the settings -----------------------------------------------------------------------------------


def test_the_settings_of_a_config_carry_its_fields_and_the_endpoint_the_operator_gave_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flytekit's ``ElasticRootCause`` as the engine reads it: the rendezvous endpoint is the training
    operator's variable (a local run has none), the watchdog and the hang watch only where switched on."""
    from flytekitplugins_rootcause.config import ElasticRootCause

    config = ElasticRootCause(nnodes="2:3", max_restarts=1, teardown_grace_s=7.0, lost_after_s=None,
                              restart_policy="soft", agent_watchdog_interval_s=2.0, hang_after_s=90.0)
    monkeypatch.setenv(RENDEZVOUS_ENDPOINT_VARIABLE, "train-worker-0.job:29400")
    settings = LaunchSettings.of(config, min_nodes=2, max_nodes=3, start_method="spawn", rdzv_backend="c10d",
                                 environment={"A": "1"})
    assert settings.rdzv_endpoint == "train-worker-0.job:29400"
    assert (settings.teardown_grace_s, settings.lost_after_s, settings.restart_policy) == (7.0, None, "soft")
    assert (settings.min_nodes, settings.max_nodes, settings.environment) == (2, 3, {"A": "1"})
    assert settings.rdzv_configs == config.rdzv_configs
    assert settings.watchdog is not None and settings.watchdog.interval_s == 2.0
    assert settings.hang is not None and settings.hang.after_s == 90.0

    monkeypatch.delenv(RENDEZVOUS_ENDPOINT_VARIABLE)
    quiet = ElasticRootCause(nnodes=1, agent_watchdog=False, hang_after_s=None)
    local = LaunchSettings.of(quiet, min_nodes=1, max_nodes=1, start_method="spawn", rdzv_backend="c10d",
                              environment={})
    assert local.rdzv_endpoint == "localhost:0"
    assert local.watchdog is None and local.hang is None


# --- the session's roads to a diagnosis ---------------------------------------------------------------


def test_outside_its_block_the_session_has_no_launch_to_run_or_diagnose() -> None:
    session = LaunchSession(_settings(), error_of=_error_of, pod_stop=PodStopNotice())
    with pytest.raises(RuntimeError, match="outside its block"), session.running():
        pass
    with pytest.raises(RuntimeError, match="outside its block"):
        session.store_lost(DistStoreError("gone"))


def test_a_sigterm_before_the_launch_block_ends_the_launch_as_it_starts_and_is_the_recoverable_root_cause() -> None:
    """The kubelet stopped the pod while it started: the launch ends at once with torch's own
    ``SignalException``, and the pod's stop is the root cause, at the moment the signal came."""
    pod_stop = PodStopNotice()
    with LaunchSession(_settings(), error_of=_error_of, pod_stop=pod_stop) as session:
        _sigterm_to_this_process(pod_stop, 1)  # noted, not fatal: the session's handler is the pod's
        ran = False
        with pytest.raises(SignalException), session.running():
            ran = True
        assert not ran
        diagnosis = session.stopped()
    assert diagnosis is not None and diagnosis.trigger is Trigger.STOPPED and diagnosis.recoverable
    stop = diagnosis.root_cause
    assert stop is not None and stop.message == STOP_MESSAGE
    assert (stop.worker, stop.global_rank, stop.pid, stop.signal_number) == (POD, None, os.getpid(), signal.SIGTERM)
    assert (stop.timestamp_ns, stop.time_source, stop.role) == (pod_stop.received_ns, TimeSource.OBSERVED,
                                                                Role.CANDIDATE)


def test_the_first_sigterm_in_the_launch_block_ends_it_and_the_stop_is_named_by_the_pod_s_first_rank() -> None:
    """A SIGTERM while the launch runs ends it (torch's agent then ends the workers); one after the block
    is only counted, and the report says how many came."""
    pod_stop = PodStopNotice()
    workers = [_worker_process(), _worker_process()]
    try:
        with LaunchSession(_settings(), error_of=_error_of, pod_stop=pod_stop) as session:
            with pytest.raises(SignalException), session.running() as observer:
                for local_rank, child in enumerate(workers):
                    observer.ledger.add_worker(LaunchedWorker(0, local_rank, 5 - local_rank, 2, child.pid, ""))
                _sigterm_to_this_process(pod_stop, 1)
            _sigterm_to_this_process(pod_stop, 2)  # while the pod writes its report: only noted
            diagnosis = session.stopped()
    finally:
        _reap(*workers)
    assert diagnosis is not None and diagnosis.trigger is Trigger.STOPPED
    stop = diagnosis.root_cause
    assert stop is not None and stop.global_rank == 4
    assert stop.message == f"{STOP_MESSAGE} (2 SIGTERMs)"


def test_without_a_sigterm_there_is_no_stop_to_report() -> None:
    with LaunchSession(_settings(), error_of=_error_of, pod_stop=PodStopNotice()) as session:
        assert session.stopped() is None


def test_a_lost_store_is_diagnosed_on_the_attempt_that_ran_and_says_how_the_agent_failed() -> None:
    """torch's agent lost the rendezvous store before it saw its workers fail: before any attempt, the
    pod's own loss of the store is a victim's failure (its host pod failed); with an attempt, a failed
    worker of it is the root cause, with the agent's own error in the report."""
    failed = _worker_process("raise SystemExit(3)")
    try:
        with LaunchSession(_settings(), error_of=_error_of, pod_stop=PodStopNotice()) as session:
            in_rendezvous = session.store_lost(DistStoreError("Connection reset by peer"))
            assert session.observer is not None
            session.observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, failed.pid, ""))
            _until(lambda: session.observer is not None and session.observer.ends.exit_of(
                session.observer.ledger.workers_of(0)[0]) is not None, "the worker's exit seen")
            diagnosis = session.store_lost(DistStoreError("Connection reset by peer"))
    finally:
        _reap(failed)
    assert diagnosis is not None and diagnosis.trigger is Trigger.STORE_LOST
    root = diagnosis.root_cause
    assert root is not None and (root.pid, root.exitcode) == (failed.pid, 3)
    assert "The agent itself failed: DistStoreError: Connection reset by peer" in diagnosis.report
    own = in_rendezvous.root_cause
    assert in_rendezvous.trigger is Trigger.STORE_LOST and in_rendezvous.recoverable and own is not None
    assert (own.role, own.worker, own.pid, own.global_rank) == (Role.VICTIM, POD, os.getpid(), None)
    assert own.message.startswith("the rendezvous store at localhost:0 went away") and own.message.endswith(
        "before this pod's workers started (the pod hosting it was stopped, lost or cut off): "
        "DistStoreError: Connection reset by peer"), own.message
    assert in_rendezvous.summary.startswith("[victim] "), in_rendezvous.summary


def test_a_store_lost_while_every_worker_runs_is_the_pod_s_victim_failure() -> None:
    """The store's host went away while this pod's workers ran and none of them failed (torch's agent
    asks the store each monitor interval): the pod's loss of the store is a victim's failure."""
    alive = _worker_process("import time; time.sleep(60)")
    try:
        with LaunchSession(_settings(), error_of=_error_of, pod_stop=PodStopNotice()) as session:
            assert session.observer is not None
            session.observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, alive.pid, ""))
            diagnosis = session.store_lost(DistStoreError("Broken pipe"))
    finally:
        _reap(alive)
    own = diagnosis.root_cause
    assert own is not None and own.role is Role.VICTIM
    assert "went away while this pod's workers ran, none of them failed" in own.message, own.message


def test_a_soft_policy_session_tells_its_history_in_the_report_and_its_channel_lives_with_the_block() -> None:
    pod_stop = PodStopNotice()
    with LaunchSession(_settings(restart_policy="soft"), error_of=_error_of, pod_stop=pod_stop) as session:
        soft = session.soft
        assert soft is not None and soft.worker == POD and soft.watch_peers == session.peers.joined
        channel = soft.channel.directory
        assert channel.is_dir() and session.restarts() == ()
        soft.changes = (Event("leave", 1, "train-worker-1", "rank 3 raised", 1_000_000_000),)
        _sigterm_to_this_process(pod_stop, 1)
        diagnosis = session.stopped()
    assert not channel.exists()
    assert diagnosis is not None and len(diagnosis.restarts) == 1 and diagnosis.restarts[0][1] == "train-worker-1"
    assert "Soft restarts before this failure" in diagnosis.report and "rank 3 raised" in diagnosis.report


# --- a peer pod lost while the job is healthy ------------------------------------------------------------


def _join_with_a_missing_peer(session: LaunchSession, store: TCPStore) -> PeerWatch:
    """This pod is group rank 0 of three; rank 2 beats; rank 1 never came (frozen right after the
    rendezvous). Returns rank 2's watch."""
    other = watch("train-worker-2", client(store.port), 2, 3)
    session.peers.joined(JoinedRound(client(store.port), 0, 3, (0, 1)))
    return other


def test_under_hard_restarts_a_lost_pod_ends_this_pod_s_workers_and_the_failure_is_the_lost_pod_s(
    store_server: TCPStore, tmp_path: Path
) -> None:
    """The peer watch's verdict ends this pod's workers at once (they would wait in a collective for
    ever); the failure torch then reports is diagnosed as a lost pod, the workers its victims."""
    worker = _worker_process()
    other: PeerWatch | None = None
    try:
        with LaunchSession(_settings(), error_of=_error_of, pod_stop=PodStopNotice()) as session:
            observer = session.observer
            assert observer is not None
            observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, worker.pid, ""))
            other = _join_with_a_missing_peer(session, store_server)
            _until(lambda: _exited(observer.watcher, worker.pid), "the worker ended")
            assert observer.ledger.teardown_of(0).began_ns is not None
            ended = observer.watcher.confirm_exit(worker.pid)
            assert ended is not None and ended.signal_number == signal.SIGTERM
            torch_view = ProcessFailure(local_rank=0, pid=worker.pid, exitcode=-signal.SIGTERM,
                                        error_file=str(tmp_path / "error.json"))
            diagnosis = session.workers_failed(ChildFailedError("train", {0: torch_view}))
    finally:
        if other is not None:
            other.close()
        _reap(worker)
    assert diagnosis is not None and diagnosis.trigger is Trigger.POD_LOST
    assert [(peer.group_rank, peer.last_seen_ns) for peer in diagnosis.lost_pods] == [(1, None)]
    root = diagnosis.root_cause
    assert root is not None and root.role is Role.VICTIM and root.pid == worker.pid


def test_under_soft_restarts_a_lost_pod_goes_to_the_soft_loop_and_this_pod_s_workers_go_on(
    store_server: TCPStore,
) -> None:
    """The soft loop takes the lost pod out of the world; the survivors' workers keep running."""
    worker = _worker_process()
    other: PeerWatch | None = None
    taken: list[LostPod] = []
    try:
        with LaunchSession(_settings(restart_policy="soft"), error_of=_error_of, pod_stop=PodStopNotice()) as session:
            observer, soft = session.observer, session.soft
            assert observer is not None and soft is not None
            observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, worker.pid, ""))
            other = _join_with_a_missing_peer(session, store_server)
            _until(lambda: taken.extend(soft.take_lost()) or taken, "the verdict handed to the soft loop")
            assert [peer.group_rank for peer in taken] == [1]
            assert not _exited(observer.watcher, worker.pid) and observer.ledger.teardown_of(0).began_ns is None
    finally:
        if other is not None:
            other.close()
        _reap(worker)


# --- the lost-pod handler and the watchdog ----------------------------------------------------------


def _round_with_a_store_host(store: TCPStore) -> tuple[PeerWatch, list[PeerWatch]]:
    """This pod's watch (group rank 1) in a round of three whose rank 0 hosts the store; all three known."""
    host = watch("train-worker-0", client(store.port), 0, 3, hosts_store=True)
    last = watch("train-worker-2", client(store.port), 2, 3)
    own = watch(POD, client(store.port), 1, 3)
    assert len(wait_for_members(own, 3)) == 3
    return own, [host, last, own]


def test_a_lost_store_host_ends_the_workers_even_under_soft_restarts_and_only_once(
    store_server: TCPStore, tmp_path: Path
) -> None:
    """Without the store the world cannot change: the workers are ended as under hard restarts (nothing
    for the soft loop), and a later verdict (another attempt running by then) ends nothing more; a
    lost pod that hosted no store goes to the soft loop."""
    own, watches = _round_with_a_store_host(store_server)
    first, second = _worker_process(), _worker_process()
    soft = SoftRestartSession(worker=POD, channel=WorkerChannel(str(tmp_path)), diagnose=lambda failed: None,
                              end_workers=lambda: None, timeout_s=NEVER_S)
    try:
        with DeathWatcher() as watcher:
            observer = LaunchObserver(watcher, teardown_grace_s=30.0)
            observer.ledger.add_worker(LaunchedWorker(0, 0, 2, 1, first.pid, ""))
            handler = LostPodHandler(observer, own, soft, watchdog=None)
            handler((LostPod(2, "train-worker-2", 1),))
            assert [peer.group_rank for peer in soft.take_lost()] == [2]
            assert observer.ledger.teardown_of(0).began_ns is None and not _exited(watcher, first.pid)
            handler((LostPod(0, "train-worker-0", 1), LostPod(2, "train-worker-2", 1)))
            assert _exited(watcher, first.pid) and soft.take_lost() == []
            observer.ledger.add_worker(LaunchedWorker(1, 0, 2, 1, second.pid, ""))
            handler((LostPod(0, "train-worker-0", 1), LostPod(2, "train-worker-2", 1)))
            assert observer.ledger.teardown_of(1).began_ns is None and not _exited(watcher, second.pid)
    finally:
        for peers in watches:
            peers.close()
        _reap(first, second)


def test_the_watchdog_reports_for_the_agent_only_when_the_lost_pod_hosted_the_store() -> None:
    """torch's agent waits for ever on a store whose host is gone: then (and only then) the watchdog
    reports a lost pod for it, soon after the workers' teardown, and ends the pod."""
    workers = [_worker_process(), _worker_process()]
    reported: list[Diagnosis] = []
    exits: list[int] = []

    def error_of(diagnosis: Diagnosis) -> BaseException:
        reported.append(diagnosis)
        return RuntimeError(diagnosis.report)

    settings = WatchdogSettings(interval_s=0.05, hang_timeout_s=10 * NEVER_S, teardown_grace_s=1.0, sink_timeout_s=1.0)
    try:
        with DeathWatcher() as watcher:
            observer = LaunchObserver(watcher, teardown_grace_s=30.0)
            with AgentWatchdog(observer, settings, error_of=error_of, exit_process=exits.append) as watchdog:
                observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, workers[0].pid, ""))
                a_peer_is_lost(observer, (LostPod(2, "train-worker-2", 1),), {0}, watchdog)
                assert _exited(watcher, workers[0].pid)
                time.sleep(LOST_POD_TEARDOWN_GRACE_S + STORE_HOST_LOST_GRACE_S + 0.5)  # past an expedited deadline
                assert exits == []
                observer.ledger.add_worker(LaunchedWorker(1, 0, 0, 0, workers[1].pid, ""))
                a_peer_is_lost(observer, (LostPod(0, "train-worker-0", 1),), {0}, watchdog)
                assert _exited(watcher, workers[1].pid)
                _until(lambda: exits, "the watchdog reported")
    finally:
        _reap(*workers)
    assert exits == [AGENT_HUNG_EXIT_CODE]  # no failure sink in a test: nothing was written
    (diagnosis,) = reported
    assert diagnosis.trigger is Trigger.POD_LOST
    assert "train-worker-0 (group rank 0)" in diagnosis.report and "hosts the rendezvous store" in diagnosis.report
