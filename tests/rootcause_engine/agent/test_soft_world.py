"""The pods' agreement on each next world (``agent.soft_world``), on a real TCPStore, one thread per node."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.soft_world import SoftWorld, World, members_after


def _node(store: Any, node: int, nodes: int = 3) -> SoftWorld:
    return SoftWorld(store, node, f"pod-{node}", range(nodes))


def _in_threads(*calls: Callable[[], World]) -> list[World]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert all(isinstance(result, World) for result in results), results
    return results


def test_the_log_decides_the_members_in_node_order() -> None:
    changes = [Event("leave", 1, "pod-1"), Event("join", 1, "pod-1"), Event("lost", 2, "pod-2")]
    assert members_after(range(3), changes[:1]) == ((0, 2), None)
    assert members_after(range(3), changes) == ((0, 1), None)
    fatal = Event("fatal", 0, "pod-0", "boom")
    assert members_after(range(3), [*changes, fatal]) == ((1,), fatal)


def test_a_node_leaves_the_others_form_a_world_without_it_then_it_joins_back(prefixed_store: Any) -> None:
    zero, one, two = _node(prefixed_store, 0), _node(prefixed_store, 1), _node(prefixed_store, 2)
    assert not zero.change_proposed()
    one.leave("worker raised")
    assert zero.change_proposed() and two.change_proposed()
    assert zero.peek().members == (0, 2)
    down = _in_threads(lambda: zero.next_world(10), lambda: two.next_world(10))
    assert [(w.version, w.members) for w in down] == [(1, (0, 2)), (1, (0, 2))]
    assert down[1].group_rank(2) == 1  # node 2 moved down to group rank 1

    up = _in_threads(lambda: one.entry.join(10), lambda: _after_proposal(zero), lambda: _after_proposal(two))
    assert {(w.version, w.members) for w in up} == {(2, (0, 1, 2))}
    assert up[0].group_rank(1) == 1  # its old place back
    assert [c.kind for c in up[0].changes] == ["leave", "join"]


def _after_proposal(world: SoftWorld) -> World:
    while not world.change_proposed():
        threading.Event().wait(0.005)
    return world.next_world(10)


def test_a_fatal_failure_reaches_every_node_without_forming_a_world(prefixed_store: Any) -> None:
    zero, two = _node(prefixed_store, 0), _node(prefixed_store, 2)
    _node(prefixed_store, 1).leave("not recoverable", fatal=True)
    for world in (zero, two):
        assert world.change_proposed()
        result = world.next_world(10)
        assert result.fatal is not None and (result.fatal.name, result.fatal.reason) == ("pod-1", "not recoverable")


def test_a_member_that_never_arrives_is_logged_lost_and_the_others_go_on(prefixed_store: Any) -> None:
    zero = _node(prefixed_store, 0)
    _node(prefixed_store, 1).leave("worker raised")
    # node 2 is gone with its whole pod: it never arrives at world 1
    world = zero.next_world(timeout_s=0.3)
    assert (world.version, world.members) == (2, (0,))
    assert [(c.kind, c.rank) for c in world.changes] == [("leave", 1), ("lost", 2)]


def test_a_join_while_a_world_forms_gives_one_sequence_of_worlds_everyone_agrees_on(prefixed_store: Any) -> None:
    zero, one, two = _node(prefixed_store, 0), _node(prefixed_store, 1), _node(prefixed_store, 2)
    two.leave("worker raised")
    one.leave("worker raised")  # both in world 1's proposal or one after the other: either way one order
    one_back = threading.Thread(target=lambda: results.append(one.entry.join(10)))
    results: list[World] = []
    one_back.start()
    final = zero.next_world(10)
    while final.members != (0, 1):
        final = _after_proposal(zero)
    one_back.join(timeout=20)
    assert results and (results[0].version, results[0].members) == (final.version, final.members)


def test_no_world_smaller_than_the_minimum_forms_its_members_wait_for_a_node_to_come_back(prefixed_store: Any) -> None:
    zero = SoftWorld(prefixed_store, 0, "pod-0", range(2), min_nodes=2)
    one = SoftWorld(prefixed_store, 1, "pod-1", range(2), min_nodes=2)
    one.leave("worker raised")  # world 1 would be pod-0 alone
    results: list[World] = []
    waiter = threading.Thread(target=lambda: results.append(zero.next_world(10)))
    waiter.start()
    threading.Event().wait(0.1)
    assert not results  # pod-0 waits, paused, instead of going on alone
    back = one.entry.join(10)
    waiter.join(timeout=20)
    assert (back.version, back.members) == (results[0].version, results[0].members) == (2, (0, 1))


def test_a_node_waiting_for_a_world_that_is_never_proposed_gives_up_clearly(prefixed_store: Any) -> None:
    zero = SoftWorld(prefixed_store, 0, "pod-0", range(2), min_nodes=2)
    SoftWorld(prefixed_store, 1, "pod-1", range(2), min_nodes=2).leave("worker raised")
    with pytest.raises(TimeoutError, match=r"no world 2 was proposed within 0\.2 s"):
        zero.next_world(0.2)


def test_a_pod_arriving_once_the_job_runs_joins_its_latest_world_as_a_new_node(prefixed_store: Any) -> None:
    """A rescheduled pod (or a late one) finds the running job in the store, takes the next free node
    index (never a lost pod's: its verdict may still be on its way) and joins after the latest
    formed world; nodes joined later end in their own barrier, not torch's first-world one."""
    assert SoftWorld.running_job_nodes(prefixed_store) is None
    assert SoftWorld.join_running(prefixed_store, "early") is None
    zero, one = _node(prefixed_store, 0), _node(prefixed_store, 1)  # node 2 is lost
    zero.entry.announce_running()
    assert SoftWorld.running_job_nodes(prefixed_store) == 3
    assert zero.exit.uses_torch_barrier
    assert zero.remove_lost(2, "pod-2", "sent no heartbeat")
    _in_threads(lambda: zero.next_world(10), lambda: one.next_world(10))
    assert not zero.exit.uses_torch_barrier  # a node was lost: torch's barrier would wait for it
    new = SoftWorld.join_running(prefixed_store, "pod-2")
    assert new is not None and new.node == 3 and new.current.members == (0, 1) and new.current.version == 1
    assert not new.exit.uses_torch_barrier
    grown = _in_threads(lambda: new.entry.join(10), lambda: zero.next_world(10), lambda: one.next_world(10))
    assert {(w.version, w.members) for w in grown} == {(2, (0, 1, 3))}
    assert grown[0].group_rank(3) == 2 and grown[0].grew
    late = SoftWorld.join_running(prefixed_store, "late")
    assert late is not None and late.node == 4  # the next one gets the next index
