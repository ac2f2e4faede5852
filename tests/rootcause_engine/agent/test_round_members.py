"""The members of a round as one pod learns them from the round's ledger (``agent/round_members.py``)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from torch.distributed import TCPStore

from rootcause_core.testimony import Member
from rootcause_engine.agent.round_ledger import RoundLedger
from rootcause_engine.agent.round_members import RoundMembers
from testbed.tcp_store import client

pytestmark = pytest.mark.timeout(60)


def _ledger(port: int, rank: int, world: int) -> RoundLedger:
    store = client(port)

    def call(operation: str, *args: Any) -> Any:
        return getattr(store, operation)(*args)

    return RoundLedger(call, world, rank)


def _members(ledger: RoundLedger, own: Member, world: int) -> RoundMembers:
    def refresh() -> bool:
        ledger.refresh()
        return True

    return RoundMembers(ledger, own, world, refresh, threading.Lock())


def test_the_members_are_learned_from_their_joins_and_the_store_host_with_them(store_server: TCPStore) -> None:
    own = Member(1, "w1", 2, 2, False)
    ledger = _ledger(store_server.port, 1, 2)
    members = _members(ledger, own, 2)
    assert members.known() == (own,) and not members.complete and not members.store_host_known
    host = Member(0, "w0", 0, 2, True)
    _ledger(store_server.port, 0, 2).join(host, None)
    ledger.refresh()
    members.learn()
    assert members.known() == (host, own) and members.complete and members.store_host_known


def test_a_member_not_known_yet_is_read_at_once_else_named_by_its_rank(store_server: TCPStore) -> None:
    members = _members(_ledger(store_server.port, 0, 3), Member(0, "w0", 0, 1, True), 3)
    _ledger(store_server.port, 1, 3).join(Member(1, "w1", 1, 1, False), None)
    assert members.member(1).worker == "w1"  # no look by the heartbeat yet: read now
    assert members.member(2).worker == "group rank 2"
