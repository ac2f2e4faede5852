"""A closed link plus a short pause never condemns a live pod; a killed pod is still named in two beats.

Issue 50, item 1. Real processes, each its own agent's ``PeerWatch`` with the default heartbeat
(0.5 s) and silence limit (5 s), on a real ``TCPStore`` on loopback. This process is pod 0 and
watches pod 1; pods 1 and 2 are processes of their own (pod 1 watches pod 2, pod 2 watches pod 0).
Every verdict, whoever reaches it, is appended to the round's ledger, and pod 0 reads them all.

- the agent pauses its peer watch while it forks its workers (``PeerWatch.paused``): its heartbeat
  goes on between the forks, and a link the network cuts meanwhile names no one;
- a pod whose heartbeat waits (a store call that takes long), or whose whole process is paused,
  while the network cuts its watcher's link still answers a fresh connection to its link listener
  (greeted, or accepted by its kernel): the watcher asks before it condemns;
- a pod killed outright (or while it pauses) refuses that connection: named in about two beats, as
  before (``benchmarks/link_verdict.py``: kill -> verdict about 1.02 s).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S
from rootcause_core.testimony import LostPod
from rootcause_engine.agent.peer_link import LinkEndpoint, answers, link_hub
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.store_layout import alive_key
from rootcause_engine.upstream.torch_elastic import JoinedRound
from testbed.sync import wait_until
from testbed.tcp_store import client

WORLD = 3
#: The recipe: the pause, and when into it the link is cut.
PAUSE_S = 1.6
CUT_AFTER_S = 0.3
#: How long after the pause a false verdict would still show (the shortened limit is two beats).
QUIET_AFTER_S = 2.0
#: A whole pod paused for half the silence limit (the longest pause a healthy pod must survive).
WHOLE_PAUSE_S = SILENCE_LIMIT_S / 2
#: A killed pod's verdict comes in about two beats (1.02 s measured); far below the silence limit.
KILL_VERDICT_BOUND_S = 2.5

#: A pod of group rank argv[2], defaults everywhere. On stdin: "pause S" holds ``peers.paused()``
#: for S seconds, forking a short-lived child every 0.1 s in it, as the agent forks its workers
#: (it prints "paused" once inside and "resumed" after); "stall S" holds the watch's store lock for S
#: seconds (a store call that takes that long: no heartbeat meanwhile), printing "stalled" and
#: "unstalled". It prints "ready" once joined.
_POD = """
import datetime, os, sys, threading, time
from torch.distributed import TCPStore
from rootcause_engine.agent.peer_link import LinkEndpoint, answers, link_hub
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=10),
                 wait_for_workers=False)
rank, world = int(sys.argv[2]), int(sys.argv[3])
peers = PeerWatch(f"pod-{rank}")
peers.joined(JoinedRound(store, rank, world, (rank,)))
print("ready", flush=True)
for line in sys.stdin:
    command, _, seconds = line.strip().partition(" ")
    if command == "pause":
        with peers.paused():
            print("paused", flush=True)
            end = time.monotonic() + float(seconds)
            while time.monotonic() < end:
                child = os.fork()
                if child == 0:
                    os._exit(0)
                os.waitpid(child, 0)
                time.sleep(0.1)
        print("resumed", flush=True)
    if command == "stall":
        with peers._store_lock:
            print("stalled", flush=True)
            time.sleep(float(seconds))
        print("unstalled", flush=True)
"""


def _start_pod(port: int, rank: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _POD, str(port), str(rank), str(WORLD)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.fixture
def pods(server_port: int) -> Iterator[dict[int, subprocess.Popen[str]]]:
    """Pods 1 and 2, joined (their own processes)."""
    started = {rank: _start_pod(server_port, rank) for rank in range(1, WORLD)}
    try:
        for pod in started.values():
            assert pod.stdout is not None and pod.stdout.readline().strip() == "ready"
        yield started
    finally:
        for pod in started.values():
            if pod.poll() is None:
                pod.kill()
            pod.wait()


@pytest.fixture
def pod_0(server_port: int) -> Iterator[tuple[PeerWatch, list[tuple[LostPod, ...]]]]:
    """This process as pod 0, with the defaults, and every verdict it is told of (its own or read)."""
    told: list[tuple[LostPod, ...]] = []
    peers = PeerWatch("pod-0")
    peers.when_a_peer_is_lost(told.append)
    peers.joined(JoinedRound(client(server_port), 0, WORLD, (0,)))
    try:
        yield peers, told
    finally:
        peers.stop()


def _linked(peers: PeerWatch) -> bool:
    current = peers._current()
    return current is not None and current.link is not None and current.link.established


def _ask(pod: subprocess.Popen[str], command: str, answer: str) -> None:
    assert pod.stdin is not None and pod.stdout is not None
    pod.stdin.write(command + "\n")
    pod.stdin.flush()
    assert pod.stdout.readline().strip() == answer


def _wait(pod: subprocess.Popen[str], answer: str) -> None:
    assert pod.stdout is not None and pod.stdout.readline().strip() == answer


def _cut_link(peers: PeerWatch) -> None:
    """Pod 0 shuts down its link socket to pod 1 (a conntrack flush, a NIC reset): both live on."""
    current = peers._current()
    assert current is not None and current.link is not None and current.link.sock is not None
    current.link.sock.shutdown(socket.SHUT_RDWR)


def _beat_of(port: int, rank: int) -> bytes:
    return client(port).get(alive_key(rank))


def _ready(peers: PeerWatch) -> None:
    assert wait_until(lambda: _linked(peers), 30.0), "pod 0's link to pod 1 was not made"
    time.sleep(3 * HEARTBEAT_INTERVAL_S)  # every pod has beaten and read its successor


def test_a_link_cut_while_the_agent_forks_its_workers_names_no_one(
    server_port: int, pods: dict[int, subprocess.Popen[str]], pod_0: tuple[PeerWatch, list[tuple[LostPod, ...]]]
) -> None:
    """The recipe: pod 1 pauses for its workers' start (1.6 s, forking), and 0.3 s into it pod 0's
    link to pod 1 is cut. Pod 1's heartbeat goes on between the forks; no pod is declared lost."""
    peers, told = pod_0
    _ready(peers)
    _ask(pods[1], f"pause {PAUSE_S}", "paused")
    beat_before = _beat_of(server_port, 1)
    time.sleep(CUT_AFTER_S)
    _cut_link(peers)
    time.sleep(PAUSE_S - CUT_AFTER_S - 2 * HEARTBEAT_INTERVAL_S)
    beat_during = _beat_of(server_port, 1)  # still inside the pause
    _wait(pods[1], "resumed")
    time.sleep(QUIET_AFTER_S)
    assert told == [], f"a live pod was declared lost: {told}"
    assert beat_during != beat_before, "pod 1's heartbeat stopped while it forked its workers"
    assert all(pod.poll() is None for pod in pods.values())


def test_a_link_cut_while_the_pod_s_heartbeat_waits_is_asked_before_it_condemns(
    pods: dict[int, subprocess.Popen[str]], pod_0: tuple[PeerWatch, list[tuple[LostPod, ...]]]
) -> None:
    """Pod 1's heartbeat waits 1.6 s (a store call that takes long: no beat at all), and 0.3 s into it
    pod 0's link to pod 1 is cut. Its agent's process lives and answers a fresh connection: no
    verdict, and the link is made again."""
    peers, told = pod_0
    _ready(peers)
    first = peers._current().link  # type: ignore[union-attr]
    _ask(pods[1], f"stall {PAUSE_S}", "stalled")
    time.sleep(CUT_AFTER_S)
    _cut_link(peers)
    _wait(pods[1], "unstalled")
    time.sleep(QUIET_AFTER_S)
    assert told == [], f"a live pod was declared lost: {told}"
    assert _linked(peers) and peers._current().link is not first, "the cut link was not made again"  # type: ignore[union-attr]


def test_a_link_cut_while_the_whole_pod_is_paused_names_no_one(
    pods: dict[int, subprocess.Popen[str]], pod_0: tuple[PeerWatch, list[tuple[LostPod, ...]]]
) -> None:
    """Pod 1's whole process is paused (SIGSTOP: a VM paused by its host, a long stall) for half the
    silence limit, and 0.3 s into it pod 0's link to pod 1 is cut. Its kernel still accepts a fresh
    connection for it (the process exists): the silence limit judges it, and it resumes in time."""
    peers, told = pod_0
    _ready(peers)
    os.kill(pods[1].pid, signal.SIGSTOP)
    try:
        time.sleep(CUT_AFTER_S)
        _cut_link(peers)
        time.sleep(WHOLE_PAUSE_S - CUT_AFTER_S)
    finally:
        os.kill(pods[1].pid, signal.SIGCONT)
    time.sleep(QUIET_AFTER_S)
    assert told == [], f"a live pod was declared lost: {told}"


def test_the_direct_question_tells_a_live_or_paused_listener_from_a_gone_one() -> None:
    """:func:`answers`: a greeting, or a connection accepted and not yet greeted (a paused process),
    is a live agent; a refused port, or another process's greeting, is not."""
    hub = link_hub()
    endpoint = hub.listen(("127.0.0.1", 1))
    assert endpoint is not None and answers(endpoint)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts in its kernel, never greets
        port = silent.getsockname()[1]
        assert answers(LinkEndpoint("127.0.0.1", port, endpoint.token), timeout_s=0.3)
    assert not answers(LinkEndpoint("127.0.0.1", port, endpoint.token), timeout_s=0.3)  # closed: refused
    assert not answers(LinkEndpoint("127.0.0.1", endpoint.port, "0" * 16), timeout_s=0.3)  # not its token


@pytest.mark.parametrize("paused", [False, True], ids=["running", "while-it-pauses"])
def test_a_killed_pod_is_still_declared_lost_in_about_two_beats(
    pods: dict[int, subprocess.Popen[str]], pod_0: tuple[PeerWatch, list[tuple[LostPod, ...]]], paused: bool
) -> None:
    """SIGKILL of pod 1 (running, or in the middle of its workers' start): its port refuses the
    watcher's question, and the verdict comes in about two beats, far below the silence limit."""
    peers, told = pod_0
    _ready(peers)
    if paused:
        _ask(pods[1], f"pause {PAUSE_S}", "paused")
    os.kill(pods[1].pid, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: bool(told), SILENCE_LIMIT_S), "the killed pod was not declared lost"
    took = time.monotonic() - killed
    assert took < KILL_VERDICT_BOUND_S, f"kill -> verdict {took:.2f} s: not the link's two beats"
    (lost,) = told[0]
    assert (lost.group_rank, lost.worker) == (1, "pod-1")
