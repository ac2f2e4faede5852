"""Forged values in the soft-restart keys: every node skips them alike, or gives up clearly, never hangs.

A real ``TCPStore`` on loopback, one ``SoftWorld`` per node (threads), and a forger writing under the
job's keys (``rootcause/soft/...``) values that are not what they hold. Every node reads the same
bytes, so a value that is skipped is skipped by all and the worlds they form agree; what cannot be
agreed on (a log counter that is no count) raises ``WorldUnreadable``, a ``TimeoutError`` the loop
answers by failing the job with a report. Each test is bounded in time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rootcause_engine.agent.soft_world import SoftWorld, World, WorldUnreadable
from rootcause_engine.agent.store_values import GAP_GRACE_S, VOID

pytestmark = pytest.mark.timeout(120)

BOMB = b"[" * 100_000


def _node(store: Any, node: int, nodes: int = 3) -> SoftWorld:
    return SoftWorld(store, node, f"pod-{node}", range(nodes))


def _in_threads(*calls: Callable[[], World]) -> list[World]:
    results: list[Any] = [None] * len(calls)
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, calls[i]())) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(isinstance(result, World) for result in results), results
    return results


def _scale_down_without_node_1(store: Any) -> list[World]:
    zero, one, two = _node(store, 0), _node(store, 1), _node(store, 2)
    one.leave("worker raised")
    return _in_threads(lambda: zero.next_world(10), lambda: two.next_world(10))


@pytest.mark.parametrize("entry", [
    BOMB,
    b'{"kind": "leave", "rank": "0", "name": "pod-0"}',  # a node index that is a string
    b'{"kind": "explode", "rank": 0, "name": "pod-0"}',
    b'{"kind": "leave", "rank": -1, "name": "pod-0"}',
    b'{"kind": "leave", "rank": 0, "name": "' + b"n" * 20_000 + b'"}',
    b'{"kind": "leave", "rank": 0, "name": 5}',
    b"\xff\xfe",
], ids=["bomb", "node-a-string", "unknown-kind", "negative-node", "oversized", "name-a-number", "not-utf8"])
def test_a_forged_log_entry_is_skipped_by_every_node_alike(prefixed_store: Any, entry: bytes) -> None:
    prefixed_store.add("rootcause/soft/log/len", 1)
    prefixed_store.set("rootcause/soft/log/1", entry)
    worlds = _scale_down_without_node_1(prefixed_store)
    assert {(w.version, w.members) for w in worlds} == {(1, (0, 2))}
    assert [(c.kind, c.rank) for c in worlds[0].changes] == [("leave", 1)]


def test_a_gap_in_the_log_is_waited_for_at_most_the_grace_then_voided(prefixed_store: Any) -> None:
    """A node that died between numbering its change and writing it: the others form their world
    after the grace, every one without the change, and the late writer numbers it again."""
    prefixed_store.add("rootcause/soft/log/len", 1)  # numbered, never written
    started = time.monotonic()
    worlds = _scale_down_without_node_1(prefixed_store)
    assert {(w.version, w.members) for w in worlds} == {(1, (0, 2))}
    assert GAP_GRACE_S <= time.monotonic() - started < GAP_GRACE_S + 10
    assert prefixed_store.get("rootcause/soft/log/1") == VOID


@pytest.mark.parametrize("proposal", [b"abc", BOMB, b"-3", str(10**9).encode()], ids=["text", "bomb", "neg", "huge"])
def test_a_forged_proposal_is_a_void_world_every_node_passes_over(prefixed_store: Any, proposal: bytes) -> None:
    prefixed_store.set("rootcause/soft/world/1", proposal)
    worlds = _scale_down_without_node_1(prefixed_store)
    assert {(w.version, w.members) for w in worlds} == {(2, (0, 2))}
    assert prefixed_store.get("rootcause/soft/decided/1") == b"abandoned"


def test_a_forged_decision_abandons_the_world_and_the_next_one_forms(prefixed_store: Any) -> None:
    prefixed_store.set("rootcause/soft/decided/1", b"\xffgarbage")
    worlds = _scale_down_without_node_1(prefixed_store)
    assert {(w.version, w.members) for w in worlds} == {(2, (0, 2))}


@pytest.mark.parametrize("counter", [b"abc", str(10**9).encode(), b"9" * 40, "\u0663".encode()],
                         ids=["text", "huge", "overflow", "unicode-digit"])
def test_a_log_counter_that_is_no_count_is_repaired_and_the_world_goes_on(prefixed_store: Any,
                                                                          counter: bytes) -> None:
    """A forged counter must not disable the job's log: it is set back to the entries written, and the
    node's leave lands, at once, with its store client still usable."""
    prefixed_store.set("rootcause/soft/log/len", counter)
    one = _node(prefixed_store, 1)
    started = time.monotonic()
    one.leave("worker raised")
    assert time.monotonic() - started < 10
    assert prefixed_store.get("rootcause/soft/log/len").isdigit()  # a count again
    one.announce_finished()  # the node's store client still works (an add on the counter would close it)
    assert one.job_finished()


def test_a_forged_job_value_or_pod_counter_starts_no_wrong_world(prefixed_store: Any) -> None:
    prefixed_store.set("rootcause/soft/job", BOMB)
    assert SoftWorld.running_job_nodes(prefixed_store) is None
    assert SoftWorld.join_running(prefixed_store, "late") is None
    prefixed_store.set("rootcause/soft/job", b'{"nodes": "3"}')
    assert SoftWorld.running_job_nodes(prefixed_store) is None
    prefixed_store.set("rootcause/soft/job", b'{"nodes": 3}')
    prefixed_store.set("rootcause/soft/added", b"abc")
    with pytest.raises(WorldUnreadable):
        SoftWorld.join_running(prefixed_store, "late")


def test_a_forged_lost_claim_is_no_claim(prefixed_store: Any) -> None:
    prefixed_store.set("rootcause/soft/lost/2", b"\xff" * 10)
    assert not _node(prefixed_store, 0).remove_lost(2, "pod-2", "sent no heartbeat")


def test_every_call_of_a_soft_world_has_a_deadline() -> None:
    """A store whose host froze never answers: each call gives up after ``store_timeout_s``."""

    class Frozen:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            return lambda *args: time.sleep(3600)

    world = SoftWorld(Frozen(), 0, "pod-0", range(2), store_timeout_s=0.2)
    started = time.monotonic()
    for call in (world.job_finished, world.change_proposed, lambda: world.leave("x"), lambda: world.next_world(60)):
        with pytest.raises(TimeoutError):
            call()
    assert time.monotonic() - started < 10
    world.close()
