"""The soft-restart agent (``agent/soft_restart_agent.py``): lost pods handed to the loop, the history's
words, and a node taking itself or its lost pods out of a real world.

Every world here is a :class:`SoftWorld` on a real c10d ``TCPStore`` on loopback (port 0), each node
with its own view of it, as the pods of a job. Where the loop runs, it runs in torch's place with a
stand-in for torch's agent (:class:`_Agent`: the parts the loop calls, nothing it decides), and the
kubelet's SIGTERM is a real signal to this process, raised by torch's own handler.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
from torch.distributed.elastic.multiprocessing.api import SignalException, _terminate_process_handler

from rootcause_core.testimony import LostPod
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.soft_restart_agent import (
    LOST_REASON,
    STOPPED_REASON,
    SoftRestartLoop,
    SoftRestartSession,
    _change_event,
    history_note,
    history_rows,
)
from rootcause_engine.agent.soft_world import SoftWorld, World
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.upstream.torch_agent_loop import AgentParts
from rootcause_engine.worker.world_events import WorkerState as ChannelState
from rootcause_engine.worker.world_events import WorldChangeEvent, events_path, read_events
from testbed.tcp_store import client, master_store

NEVER_S = 60.0


def _session(tmp_path: Path, worker: str = "pod-0", *, min_nodes: int = 1,
             ended: list[str] | None = None) -> SoftRestartSession:
    return SoftRestartSession(
        worker=worker,
        channel=WorkerChannel(str(tmp_path / worker)),
        diagnose=lambda failed: None,
        end_workers=lambda: ended.append(worker) if ended is not None else None,
        timeout_s=NEVER_S,
        min_nodes=min_nodes,
    )


def _loop_in_world(session: SoftRestartSession, store: TCPStore, node: int, nodes: int) -> SoftRestartLoop:
    """The loop of node ``node`` once the first world (``nodes`` nodes) formed."""
    loop = SoftRestartLoop(session)
    loop.world = SoftWorld(store, node, session.worker, range(nodes), session.min_nodes)
    return loop


def _next_worlds(*views: SoftWorld) -> list[World]:
    """Every view follows the proposed change, each on its own thread (as each pod does)."""
    results: list[World | None] = [None] * len(views)

    def follow(index: int) -> None:
        results[index] = views[index].next_world(NEVER_S)

    threads = [threading.Thread(target=follow, args=(i,)) for i in range(len(views))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=NEVER_S + 10)
    assert all(isinstance(world, World) for world in results), results
    return cast(list[World], results)


# --- the lost pods the peer watch hands over ---------------------------------------------------------


def test_each_lost_pod_is_taken_once_and_keeps_the_node_its_own_round_named(tmp_path: Path) -> None:
    """What the loop takes is gone from the session; a verdict already pending keeps its node when a
    later world's mapping (a world with a pod that joined the running job) arrives, and a verdict of
    that later round is mapped with it."""
    session = _session(tmp_path)
    assert session.take_lost() == []
    session.peers_lost((LostPod(1, "pod-1", 10), LostPod(2, "pod-2", None)))
    session.peer_nodes = (0, 2, 3)  # the next world's peer watch ranks nodes 0, 2, 3 densely
    session.peers_lost((LostPod(2, "pod-3", 20),))
    assert [(p.group_rank, p.worker, p.last_seen_ns) for p in session.take_lost()] == [
        (1, "pod-1", 10), (2, "pod-2", None), (3, "pod-3", 20)]
    assert session.take_lost() == []


def test_verdicts_told_from_several_threads_are_all_taken(tmp_path: Path) -> None:
    """The peer watch tells each verdict on a thread of its own while the loop takes them."""
    session = _session(tmp_path)
    taken: list[LostPod] = []
    tellers = [threading.Thread(target=session.peers_lost, args=((LostPod(rank, f"pod-{rank}", None),),))
               for rank in range(1, 33)]
    for teller in tellers:
        teller.start()
        taken += session.take_lost()
    for teller in tellers:
        teller.join(timeout=NEVER_S)
    taken += session.take_lost()
    assert sorted(peer.group_rank for peer in taken) == list(range(1, 33))


# --- the history the report and the Deck show ---------------------------------------------------------


def test_a_lost_and_a_fatal_change_read_as_their_words_and_the_note_says_why_this_pod_stopped(
    tmp_path: Path,
) -> None:
    session = _session(tmp_path)
    session.changes = (
        Event("lost", 2, "pod-2", LOST_REASON, 1_000_000_000),
        Event("fatal", 1, "pod-1", "rank 3 raised ValueError", 2_000_000_000),
    )
    session.worlds = [(0, (0, 1, 2), 500_000_000), (1, (0, 1), 1_500_000_000)]
    session.fatal_elsewhere = "pod-1: rank 3 raised ValueError"
    rows = history_rows(session)
    assert [(node, what) for _, node, what, _ in rows] == [
        ("pod-2", "was lost (it never arrived at a new world, or sent no heartbeat); the others went on without it"),
        ("pod-1", "failed for good"),
    ]
    note = history_note(session)
    assert f"pod-2 was lost (it never arrived at a new world, or sent no heartbeat); the others went on without it: " \
           f"{LOST_REASON}" in note
    assert "pod-1 failed for good: rank 3 raised ValueError" in note
    assert "This pod's workers were ended because: pod-1: rank 3 raised ValueError" in note
    assert note.rstrip().endswith("1: nodes [0, 1] at 1970-01-01T00:00:01.500000000Z")


def test_workers_are_told_a_scale_up_for_a_join_and_a_scale_down_for_any_other_change() -> None:
    leave, join, lost = Event("leave", 1, "pod-1"), Event("join", 1, "pod-1"), Event("lost", 2, "pod-2")
    assert _change_event(World(1, (0, 2), changes=(leave,))) is WorldChangeEvent.SCALE_DOWN
    assert _change_event(World(2, (0, 1, 2), changes=(leave, join))) is WorldChangeEvent.SCALE_UP
    assert _change_event(World(3, (0, 1), changes=(leave, join, lost))) is WorldChangeEvent.SCALE_DOWN


# --- lost pods taken out of the world -------------------------------------------------------------


def test_a_lost_pod_is_taken_out_of_the_world_and_the_others_go_on_without_it(
    tmp_path: Path, store_server: TCPStore
) -> None:
    """The loop of the first node that takes the verdict logs the peer lost; every node then forms the
    world without it. A verdict on a pod that is no member of the world (already gone) changes nothing."""
    session = _session(tmp_path, "pod-0")
    loop = _loop_in_world(session, store_server, 0, 3)
    one = SoftWorld(store_server, 1, "pod-1", range(3))
    session.peers_lost((LostPod(7, "stranger", None),))
    loop._scale_down_lost()
    assert not one.change_proposed()
    session.peers_lost((LostPod(2, "pod-2", 5),))
    loop._scale_down_lost()
    assert one.change_proposed()
    formed = _next_worlds(loop.world, one)
    assert {(world.version, world.members) for world in formed} == {(1, (0, 1))}
    assert [(c.kind, c.rank, c.name, c.reason) for c in formed[0].changes] == [("lost", 2, "pod-2", LOST_REASON)]
    assert session.fatal_elsewhere is None


def test_a_loss_that_leaves_fewer_nodes_than_the_job_needs_ends_the_job_everywhere(
    tmp_path: Path, store_server: TCPStore
) -> None:
    """Below ``min_nodes`` the job cannot go on: this node logs a fatal change naming the lost pod (every
    node's report names it), ends its own workers, and remembers why."""
    ended: list[str] = []
    session = _session(tmp_path, "pod-0", min_nodes=3, ended=ended)
    loop = _loop_in_world(session, store_server, 0, 3)
    two = SoftWorld(store_server, 2, "pod-2", range(3), min_nodes=3)
    session.peers_lost((LostPod(1, "pod-1", None),))
    loop._scale_down_lost()
    assert ended == ["pod-0"]
    assert session.fatal_elsewhere is not None and "pod-1 lost" in session.fatal_elsewhere
    world = two.next_world(NEVER_S)
    assert world.fatal is not None and world.fatal.name == "pod-0" and "pod-1 lost" in world.fatal.reason
    assert not any(change.kind == "lost" for change in world.changes)  # ended, not scaled down


def test_a_peer_told_lost_twice_before_the_loop_looks_is_logged_lost_once(
    tmp_path: Path, store_server: TCPStore
) -> None:
    """The peer watch tells the loop *every* peer declared lost so far each time a new one is declared:
    two silent neighbours within one monitor interval reach the session as (pod-1,) then (pod-1, pod-2).
    The log must say pod-1 was lost once: a second entry is one more world proposal and a second
    "pod-1 was lost" line in every pod's report and Deck (the history is the log)."""
    session = _session(tmp_path, "pod-0")
    loop = _loop_in_world(session, store_server, 0, 4)
    session.peers_lost((LostPod(1, "pod-1", None),))
    session.peers_lost((LostPod(1, "pod-1", None), LostPod(2, "pod-2", None)))
    loop._scale_down_lost()
    three = SoftWorld(store_server, 3, "pod-3", range(4))
    while three.change_proposed():  # the survivors follow every proposed change, as their loops do
        final, _ = _next_worlds(three, loop.world)
    assert final.members == (0, 3)
    assert [(c.kind, c.rank) for c in final.changes] == [("lost", 1), ("lost", 2)]


# --- this node leaving for good (its kubelet stops the pod) -------------------------------------------


def test_a_node_leaving_for_good_is_logged_lost_once_and_the_others_form_the_world_without_it(
    tmp_path: Path, store_server: TCPStore
) -> None:
    """The stopped node takes itself out at once (the others need not wait for its heartbeat to stop);
    when the peer watch's verdict on it comes later, nobody logs it a second time."""
    leaving = _loop_in_world(_session(tmp_path, "pod-1"), store_server, 1, 3)
    zero, two = SoftWorld(store_server, 0, "pod-0", range(3)), SoftWorld(store_server, 2, "pod-2", range(3))
    leaving._leave_for_good(STOPPED_REASON)
    assert zero.change_proposed() and two.change_proposed()
    assert not zero.remove_lost(1, "pod-1", LOST_REASON)  # the verdict that follows: already logged
    formed = _next_worlds(zero, two)
    assert {(world.version, world.members) for world in formed} == {(1, (0, 2))}
    assert [(c.kind, c.rank, c.name, c.reason) for c in formed[0].changes] == [("lost", 1, "pod-1", STOPPED_REASON)]


def test_leaving_for_good_before_any_world_or_after_the_store_went_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped before torch's rendezvous formed a world: nothing to leave. Stopped after the store's host
    went: the peer watch finds this pod gone instead, and the stop itself (torch's ``SignalException``)
    must still end the launch, not a store error."""
    SoftRestartLoop(_session(tmp_path, "pod-0"))._leave_for_good(STOPPED_REASON)
    host = master_store(timeout_s=5.0)
    leaving = _loop_in_world(_session(tmp_path, "pod-1"), client(host.port, timeout_s=5.0), 1, 2)
    del host
    gc.collect()  # the server goes with its last reference, as with its pod
    with caplog.at_level(logging.WARNING, logger="rootcause_engine.agent.soft_restart_agent"):
        leaving._leave_for_good(STOPPED_REASON)
    assert "could not take this node out of the world" in caplog.text
    leaving.world.close()


class _Agent:
    """Stand-in for torch's agent as the loop sees it (:class:`AgentParts`: this one object plays its
    ``round``, ``workers`` and ``ending``): a node of the first world with two local workers, whose
    monitor poll is where the kubelet's SIGTERM reaches the agent."""

    local_world_size = 2
    monitor_interval = 0.01
    job_store = None
    shares_rendezvous_store = True

    def __init__(self, store: TCPStore, group_rank: int, group_world_size: int) -> None:
        self.store = store
        self.group_rank = group_rank
        self.group_world_size = group_world_size
        self.world_store_address = ("127.0.0.1", store.port)
        self._ranks: dict[int, tuple[int, int]] = {}
        self.started = 0
        self.polls = 0
        self.round = self.workers = self.ending = self

    def rendezvous(self) -> None:
        """torch's rendezvous already gave this node its group rank."""

    def set_ranks(self, first_global_rank: int, world_size: int) -> None:
        self._ranks = {local: (first_global_rank + local, world_size) for local in range(self.local_world_size)}

    def ranks(self) -> dict[int, tuple[int, int]]:
        return dict(self._ranks)

    def start(self) -> dict[int, int]:
        self.started += 1
        return {}

    def poll(self) -> RunResult:
        """The workers train; on the third look the kubelet stops the pod (a real SIGTERM to this process)."""
        self.polls += 1
        if self.polls < 3:
            return RunResult(state=WorkerState.HEALTHY)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + NEVER_S
        while time.monotonic() < deadline:  # torch's handler raises in this thread at its next bytecode
            time.sleep(0.01)
        raise AssertionError("the SIGTERM never reached torch's handler")


@pytest.fixture
def torch_sigterm_handler() -> Iterator[None]:
    """torch's agent's SIGTERM handler (``SignalException``), for the test only."""
    previous = signal.signal(signal.SIGTERM, _terminate_process_handler)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("torch_sigterm_handler")
def test_a_pod_stopped_while_it_trains_leaves_the_world_for_good_and_the_stop_ends_its_launch(
    tmp_path: Path, store_server: TCPStore
) -> None:
    """The loop forms the first world from torch's rendezvous (ranks in torch's worker group, each worker's
    first event HEALTHY with its place and the world's store), then the SIGTERM comes: torch's
    ``SignalException`` ends the launch, and the others have this node's departure in the log already."""
    session = _session(tmp_path, "pod-1")
    agent = _Agent(store_server, group_rank=1, group_world_size=3)
    with pytest.raises(SignalException):
        SoftRestartLoop(session)(cast(AgentParts, agent))
    assert agent.started == 1 and agent.ranks() == {0: (2, 6), 1: (3, 6)}
    for local_rank, rank in ((0, 2), (1, 3)):
        (first,) = read_events(events_path(session.channel.directory, local_rank))
        assert first.worker_state is ChannelState.HEALTHY and first.worker_info is not None
        info = first.worker_info
        assert (info.rank, info.world_size, info.world_version) == (rank, 6, 0)
        assert (info.master_addr, info.master_port) == ("127.0.0.1", store_server.port)
    assert session.worlds and session.worlds[0][:2] == (0, (0, 1, 2))
    assert SoftWorld.running_job_nodes(store_server) == 3  # a rescheduled pod will find the job running
    zero = SoftWorld(store_server, 0, "pod-0", range(3))
    assert zero.change_proposed()
    proposed = zero.peek()
    assert proposed.members == (0, 2)
    assert [(c.kind, c.rank, c.name, c.reason) for c in proposed.changes] == [("lost", 1, "pod-1", STOPPED_REASON)]
