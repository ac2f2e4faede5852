"""An error nobody expected on the peer watch's thread never turns a healthy pod into a lost one
(``thread_guard.py``, ``agent/peer_watch.py``, ``agent/peer_link.py``).

Real ``PeerWatch`` instances (each its own client) on a real ``TCPStore`` on loopback, their real
heartbeat threads and the process's real link hub. The error is either one the store can carry (a
peer's link host that the IDNA codec refuses) or one put into a single method of one pod: whatever
raises, the pod's heartbeat goes on (or, should its thread die, the pod says it failed), its peers
declare no one lost, and the pod's report says what happened.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rootcause_engine.agent import peer_link
from rootcause_engine.agent.peer_link import link_hub, probe
from rootcause_engine.thread_guard import LoopGuard
from testbed.sync import wait_until
from testbed.tcp_store import client
from tests.scenarios.test_forged_store_values import INTERVAL_S, WAIT_S, Pod, beats_on, forge_event

pytestmark = pytest.mark.timeout(120)

#: The watched pod's silence limit: long against a beat, short enough for a wrong verdict to show.
SILENCE_S = 1.0
#: Several silence limits: a pod whose heartbeat stopped would be declared lost within it.
QUIET_S = 4 * SILENCE_S


@contextmanager
def beating(port: int, rank: int) -> Iterator[None]:
    """The heartbeat of a pod the test plays (its agent is the test): one beat per interval."""
    stop = threading.Event()
    beater = client(port)

    def beat() -> None:
        while not stop.wait(INTERVAL_S):
            beater.set(f"rootcause/alive/{rank}", str(time.time_ns()))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _close(pods: list[Pod]) -> None:
    for pod in pods:
        pod.watch.close()


def test_a_look_that_raises_costs_that_look_and_the_heartbeat_goes_on(
        server_port: int, caplog: pytest.LogCaptureFixture) -> None:
    """Pod 1's every look raises: it keeps beating, pod 0 (its watcher) declares no one lost, the
    traceback is logged once, and pod 1's report says its watch failed."""
    pods = [Pod(server_port, rank, 3, silence_s=SILENCE_S) for rank in range(3)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 3 for pod in pods), WAIT_S)

        def broken_look(*_: object, **__: object) -> None:
            raise ZeroDivisionError("a bug no check foresaw")

        with caplog.at_level(logging.DEBUG, logger="rootcause_engine.thread_guard"):
            current = pods[1].watch._current()
            assert current is not None
            current.beat._watch_liveness = broken_look  # type: ignore[method-assign]
            time.sleep(QUIET_S)
            assert beats_on(server_port, [0, 1, 2])
        assert [pod.lost for pod in pods] == [[], [], []]
        assert current.beat.running
        tracebacks = [record for record in caplog.records
                      if record.levelno >= logging.ERROR and record.exc_info and "peer watch" in record.getMessage()]
        assert len(tracebacks) == 1 and tracebacks[0].exc_info[0] is ZeroDivisionError  # type: ignore[index]
        note = pods[1].watch.watch_note()
        assert note is not None and "peer watch failed at " in note and "ZeroDivisionError: a bug" in note
        assert pods[0].watch.watch_note() is None
    finally:
        _close(pods)


def test_a_store_client_step_that_raises_reaches_the_pod_s_report(
        server_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's store client fails one step outside the operation (a bug no check foresaw): the
    heartbeat goes on, and the watch's note for the report says what the client lost."""
    pods = [Pod(server_port, rank, 2, silence_s=SILENCE_S) for rank in range(2)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 2 for pod in pods), WAIT_S)
        current = pods[1].watch._current()
        assert current is not None
        store = current.peer_round.client
        real, failed = store._answer, []

        def broken(request: object) -> None:
            if not failed:
                failed.append(request)
                raise UnicodeError("label too long (a bug no check foresaw)")
            real(request)  # type: ignore[arg-type]

        monkeypatch.setattr(store, "_answer", broken)
        assert wait_until(lambda: bool(failed), WAIT_S)
        assert beats_on(server_port, [0, 1])
        note = pods[1].watch.watch_note()
        assert note is not None and "store client failed at " in note and "UnicodeError" in note, note
        assert [pod.lost for pod in pods] == [[], []]
    finally:
        _close(pods)


def test_a_peer_s_link_host_that_no_socket_takes_is_no_witness_and_stops_nothing(server_port: int) -> None:
    """Rank 2 (the test) joined with a link host the IDNA codec refuses (a label of 64 letters). Pod 1
    freezes; pod 0, its watcher, probes its other witnesses before it accuses: the malformed host
    is no witness, so pod 0 names pod 1 and beats on (probing it raised ``UnicodeError`` on pod 0's
    heartbeat thread, which then died: pod 0 was declared lost in its turn)."""
    host = "a" * 64 + ".example"
    forge_event(client(server_port), json.dumps({
        "kind": "join", "rank": 2, "name": "w2", "time_ns": time.time_ns(),
        "data": {"member": [2, "w2", 4, 1, 0], "link": f"0a1b2c3d {server_port} {host}"}}).encode())
    with beating(server_port, 2):
        pods = [Pod(server_port, rank, 3, silence_s=SILENCE_S) for rank in (0, 1)]
        try:
            assert wait_until(lambda: all(len(pod.watch.members()) == 3 for pod in pods), WAIT_S)
            pods[1].watch.stop()  # frozen: its watcher, pod 0, accuses it
            assert wait_until(lambda: bool(pods[0].lost), WAIT_S)
            assert [peer.group_rank for peer in pods[0].lost[0][1]] == [1]
            assert beats_on(server_port, [0])
            assert pods[0].watch.watch_note() is None  # nothing went wrong with pod 0's own watch
        finally:
            _close(pods)


class _Broken(threading.Event):
    """The round's wake-up event of a watch whose loop itself breaks (outside any one look)."""

    def wait(self, timeout: float | None = None) -> bool:
        raise RuntimeError("the loop itself broke")


def test_a_heartbeat_thread_that_dies_anyway_says_its_pod_failed(server_port: int) -> None:
    """Pod 1's heartbeat thread dies between two beats: pod 1 announces its failure, so its peers are
    told it failed (and write nothing of a lost pod), and its report says its watch stopped."""
    pods = [Pod(server_port, rank, 3, silence_s=SILENCE_S) for rank in range(3)]
    try:
        assert wait_until(lambda: all(len(pod.watch.members()) == 3 for pod in pods), WAIT_S)
        current = pods[1].watch._current()
        assert current is not None
        assert current.beat._loop is not None
        current.beat._loop._woken = _Broken()
        assert wait_until(lambda: pods[0].peer_failed == 1 and pods[2].peer_failed == 1, WAIT_S)
        time.sleep(QUIET_S)  # pod 1 beats no more: silent, and failed
        assert [pod.lost for pod in pods] == [[], [], []]
        note = pods[1].watch.watch_note()
        assert note is not None and "peer watch stopped (RuntimeError: the loop itself broke)" in note
        assert pods[0].watch.lost_pods.search() == ()  # the failure path too: it failed, it is not lost
    finally:
        _close(pods)


def test_the_link_hub_outlives_an_error_in_serving_one_connection(monkeypatch: pytest.MonkeyPatch,
                                                                  server_port: int) -> None:
    """Accepting a watcher raises once: the hub's thread goes on, greets that watcher at its next
    turn and every one after it (its death would leave every link and probe of the process
    unanswered), and says so in the report."""
    hub = link_hub()
    monkeypatch.setattr(hub, "guard", LoopGuard("peer link hub"))  # the process's hub: its own note is kept
    endpoint = hub.listen(("127.0.0.1", server_port))
    assert endpoint is not None
    accept = hub._accept
    raised: list[bool] = []

    def accept_once_broken(*args: object) -> None:
        if not raised:
            raised.append(True)
            raise KeyError("one bad connection")
        accept(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(hub, "_accept", accept_once_broken)
    assert probe(endpoint) and raised
    assert probe(endpoint)
    note = peer_link.hub_note()
    assert note is not None and "peer link hub failed at " in note and "KeyError" in note
    assert hub._loop.running
