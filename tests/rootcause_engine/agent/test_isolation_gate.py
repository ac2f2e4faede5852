"""The isolation gate: the larger side names, the smaller names no one, an even split is settled by
a third party (the cluster's API endpoint, and what each pod posts in the object store)."""

from __future__ import annotations

import concurrent.futures
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from rootcause_core.liveness import Reach, Settled, settle_even_split
from rootcause_engine.agent import isolation_gate
from rootcause_engine.agent.isolation_gate import (
    FsspecBoard,
    GateAnswer,
    IsolationGate,
    Suspect,
    decode_contact,
    encode_contact,
    may_name_missing,
)


@pytest.fixture
def api() -> Iterator[tuple[str, int]]:
    """A listener on loopback that stands for the cluster's API endpoint (the kernel accepts)."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield "127.0.0.1", listener.getsockname()[1]


def _closed_port() -> tuple[str, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1", sock.getsockname()[1]


def _gate(name: str, board: FsspecBoard | None, api: tuple[str, int] | None, *, reached: int = 0) -> IsolationGate:
    return IsolationGate(name, contact=f"c{name[-1]}", board=board, wait_s=3.0, api=api,
                         probe=lambda endpoints: reached)


def _board(tmp_path: Path) -> FsspecBoard:
    return FsspecBoard(fsspec.filesystem("file"), str(tmp_path / "prefix"))


def _both(one: IsolationGate, other: IsolationGate) -> tuple[GateAnswer, GateAnswer]:
    """Each pod accuses the other at once, as two pods that lost each other do."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(one.judge, {1: Suspect("pod-1", "c1")}, [], block=True)
        second = pool.submit(other.judge, {0: Suspect("pod-0", "c0")}, [], block=True)
        return first.result(timeout=30), second.result(timeout=30)


def test_the_larger_side_names_and_the_smaller_names_no_one() -> None:
    gate = _gate("pod-0", None, None, reached=2)
    assert gate.judge({3: Suspect("pod-3", None)}, ["w1", "w2"]) == GateAnswer(lost=frozenset({3}))  # type: ignore[list-item]
    isolated = _gate("pod-0", None, None, reached=0)
    answer = isolated.judge({1: Suspect("pod-1", None), 2: Suspect("pod-2", None)}, ["w3"])  # type: ignore[list-item]
    assert answer.cut_off is not None and not answer.lost


def test_an_even_split_where_only_the_link_was_lost_names_both_ends(tmp_path: Path, api: tuple[str, int]) -> None:
    board = _board(tmp_path)
    zero, one = _both(_gate("pod-0", board, api), _gate("pod-1", board, api))
    assert zero == GateAnswer(links=frozenset({1})) and one == GateAnswer(links=frozenset({0}))


def test_an_even_split_names_the_pod_that_reached_less(tmp_path: Path, api: tuple[str, int]) -> None:
    """pod-1 still writes the object store (a shared folder) but reaches no API endpoint: it is the
    one cut off from the network; pod-0 names it, it names no one."""
    board = _board(tmp_path)
    zero, one = _both(_gate("pod-0", board, api), _gate("pod-1", board, _closed_port()))
    assert zero == GateAnswer(lost=frozenset({1}))
    assert one.cut_off is not None and not one.lost and not one.links


def test_a_peer_that_posts_nothing_is_lost_after_the_wait(tmp_path: Path, api: tuple[str, int]) -> None:
    answer = _gate("pod-0", _board(tmp_path), api).judge({1: Suspect("pod-1", "c1")}, [], block=True)
    assert answer == GateAnswer(lost=frozenset({1}))


def test_a_pod_the_object_store_refuses_names_no_one(tmp_path: Path, api: tuple[str, int]) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the prefix's folder would be")
    board = FsspecBoard(fsspec.filesystem("file"), str(blocked))
    answer = _gate("pod-0", board, api).judge({1: Suspect("pod-1", "c1")}, [], block=True)
    assert answer.cut_off is not None and not answer.lost


def test_the_settling_never_blocks_the_heartbeat(tmp_path: Path, api: tuple[str, int]) -> None:
    gate = _gate("pod-0", _board(tmp_path), api)
    assert gate.judge({1: Suspect("pod-1", "c1")}, []).pending  # asked again at the next look
    assert gate.judge({1: Suspect("pod-1", "c1")}, [], block=True).lost == {1}
    assert gate.judge({1: Suspect("pod-1", "c1")}, []).lost == {1}  # settled once, the same answer after


def test_the_rule_for_an_even_split() -> None:
    both = Reach(api=True, object_store=True)
    assert settle_even_split(both, None) is Settled.ACCUSE
    assert settle_even_split(both, both) is Settled.LINK
    assert settle_even_split(both, Reach(api=False, object_store=True)) is Settled.ACCUSE
    assert settle_even_split(Reach(api=False, object_store=True), both) is Settled.CUT_OFF
    assert settle_even_split(Reach(api=False, object_store=None), None) is Settled.CUT_OFF
    assert settle_even_split(Reach(api=True, object_store=False), None) is Settled.CUT_OFF
    assert settle_even_split(Reach(api=None, object_store=None), None) is Settled.ACCUSE  # no third party known


@pytest.mark.parametrize("data", [b"", b"{", b"[1]", b'{"api": "yes"}', b"\xff", b'{"api": true}' + b" " * 5000,
                                  b"[" * 100_000])
def test_a_contact_that_is_not_one_is_not_heard(data: bytes) -> None:
    assert decode_contact(data) is None


def test_a_contact_is_read_back_as_posted() -> None:
    reach = Reach(api=False, object_store=True)
    assert decode_contact(encode_contact("pod-\u00e9", reach)) == reach


def test_nodes_that_never_arrived_are_named_only_from_the_larger_side(api: tuple[str, int]) -> None:
    assert may_name_missing(missing=1, arrived=2, api=None) is None
    assert may_name_missing(missing=3, arrived=0, api=api) is not None  # a cut-off store host sees all miss
    assert may_name_missing(missing=1, arrived=0, api=api) is None  # two nodes, the API reached
    assert may_name_missing(missing=1, arrived=0, api=_closed_port()) is not None


def test_an_object_store_that_never_answers_leaves_the_failure_path_naming_no_one(
    tmp_path: Path, api: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """This pod's post never returns (a FIFO nobody reads stands for a store that accepts and then
    hangs): the failure path's wait for the settling ends after its bound, and accuses no one."""
    monkeypatch.setattr(isolation_gate, "SETTLE_MARGIN_S", 0.5)
    board = _board(tmp_path)
    contact = Path(board.prefix) / isolation_gate.CONTACT_FOLDER / "c0.json"
    contact.parent.mkdir(parents=True)
    os.mkfifo(contact)
    gate = IsolationGate("pod-0", contact="c0", board=board, wait_s=0.5, api=api, probe=lambda endpoints: 0)
    try:
        answer = gate.judge({1: Suspect("pod-1", "c1")}, [], block=True)
        assert not answer.lost and answer.cut_off is not None
        assert "did not answer" in answer.cut_off and "declares no one lost" in answer.cut_off
    finally:
        with open(contact, "rb"):  # the hung post gets its reader and ends
            pass
