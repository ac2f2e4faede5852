"""The collective positions a rank reports, and the rule that says whether it entered a collective."""

from __future__ import annotations

import pytest

from rootcause_core.collectives import (
    INIT_OP,
    CollectivePosition,
    entered,
    init_stall,
    is_collective_timeout,
    is_timeout_message,
    positions_from_entries,
    positions_from_json,
    timed_out_in,
)


def _entry(pg: int, seq: int, name: str = "gloo:all_reduce", created: int | None = None) -> dict:
    return {"pg_id": pg, "collective_seq_id": seq, "profiling_name": name, "time_created_ns": created}


def test_the_last_collective_per_group_is_kept_from_flight_recorder_entries_in_any_order() -> None:
    entries = [_entry(0, 3, created=30), _entry(1, 1, "gloo:barrier", 15), _entry(0, 1, created=10), _entry(0, 2)]
    assert positions_from_entries(entries) == [
        CollectivePosition("0", 3, "gloo:all_reduce", 30),
        CollectivePosition("1", 1, "gloo:barrier", 15),
    ]


def test_entries_without_a_sequence_number_are_ignored() -> None:
    entries = [{"pg_id": 0, "collective_seq_id": "3"}, {"pg_id": 0, "collective_seq_id": True}, {}]
    assert positions_from_entries(entries) == []


def test_positions_round_trip_through_json_and_malformed_ones_are_dropped() -> None:
    good = CollectivePosition("0", 4, "nccl:all_reduce", 123)
    values = [good.to_json(), {"pg": "0", "seq": -1}, {"pg": 0, "seq": 1}, {"pg": "0", "seq": True}, "junk",
              {"pg": "0", "seq": 2, "entered_ns": "x"}]
    assert positions_from_json(values) == [good]
    assert positions_from_json("not a list") == []


def test_a_rank_behind_in_the_group_never_entered_a_rank_at_or_past_it_did() -> None:
    stalled = CollectivePosition("0", 4, "gloo:all_reduce", 100)
    assert entered(stalled, [CollectivePosition("0", 3)]) is False
    assert entered(stalled, [CollectivePosition("0", 4)]) is True
    assert entered(stalled, [CollectivePosition("0", 5)]) is True
    # another group only, or nothing: unknown (not a member, or no Flight Recorder)
    assert entered(stalled, [CollectivePosition("1", 9)]) is None
    assert entered(stalled, []) is None


def test_the_collective_a_timed_out_rank_waited_in_is_its_latest_entered() -> None:
    positions = [CollectivePosition("0", 7, entered_ns=50), CollectivePosition("1", 2, entered_ns=80)]
    assert timed_out_in(positions) == CollectivePosition("1", 2, entered_ns=80)
    assert timed_out_in([]) is None


@pytest.mark.parametrize(
    ("message", "timeout"),
    [
        ("RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation", True),
        ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE)", True),
        ("RuntimeError: Connection closed by peer [127.0.0.1]:1234", False),
    ],
)
def test_timeout_messages_are_recognised(message: str, timeout: bool) -> None:
    assert is_timeout_message(message) is timeout


def test_describe_names_the_collective_without_its_backend() -> None:
    assert CollectivePosition("0", 4, "gloo:all_reduce").describe() == "all_reduce #4 of process group 0"
    assert CollectivePosition("2", 1).describe() == "collective #1 of process group 2"


def test_only_a_collective_s_timeout_counts_not_a_user_s_own() -> None:
    assert is_collective_timeout("RuntimeError: [gloo/transport/tcp/pair.cc:598] Timed out waiting 3000ms for recv")
    assert is_collective_timeout("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4)")
    assert not is_collective_timeout("TimeoutError: the data loader timed out")
    assert not is_collective_timeout("RuntimeError: gloo: Connection closed by peer")


def test_a_stalled_initialisation_round_trips_through_json_with_the_ranks_awaited() -> None:
    stall = init_stall("DistStoreError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2", 30_000_000_000)
    assert stall == CollectivePosition("0", 0, INIT_OP, 10_000_000_000, (2,))
    assert stall.is_init and stall.describe() == "the initialisation of process group 0"
    assert positions_from_json([stall.to_json()]) == [stall]
    for awaited in ("2", [2, "3"], [-1], [True]):
        assert positions_from_json([{**stall.to_json(), "awaited": awaited}]) == []
    unstamped = init_stall("DistStoreError: wait timeout after 20000ms, keys: /default_pg/0//cpu//0/2", None)
    assert unstamped is not None and unstamped.entered_ns is None
    assert init_stall("ValueError: bad batch", 1) is None


def test_the_rank_awaited_in_a_stalled_initialisation_never_entered_it_and_the_others_are_unknown() -> None:
    stall = CollectivePosition("0", 0, INIT_OP, 100, (2,))
    assert entered(stall, [], 2) is False
    assert entered(stall, [], 1) is None  # its stacks must tell
    assert entered(stall, [CollectivePosition("0", 1)], 1) is True  # past the initialisation


def test_point_to_point_positions_are_no_collectives_of_their_group() -> None:
    from rootcause_core.collectives import CollectivePosition, entered, last_in_group, merged_stall

    barrier = CollectivePosition("0", 2, "gloo:barrier", 300)
    recv = CollectivePosition("0", 9, "recv", 1_000, (4,))
    assert recv.is_point_to_point and not barrier.is_point_to_point
    assert last_in_group([barrier, recv], "0") == barrier
    assert CollectivePosition.from_json(recv.to_json()) == recv
    # a point-to-point stall is entered by no rank but the peers it waited for, and says nothing of others
    assert entered(recv, [barrier], 4) is False and entered(recv, [barrier], 1) is None
    # a collective that stalled later wins over an earlier point-to-point stall, and keeps its own awaited
    later = CollectivePosition("0", 3, "gloo:all_reduce", 2_000)
    assert merged_stall([recv, later]) == later
    assert merged_stall([]) is None
