"""The verdict on a rank while the job is healthy (``diagnosis.stalled_rank``), pure: its peers wait for
it, it has not entered what they wait in, and its process tree made no progress."""

from __future__ import annotations

import json

import pytest

from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.stalled_rank import (
    MAX_WAITS,
    NoProgressVerdict,
    PeerWait,
    ProgressRule,
    ProgressTrack,
    stalled_rank_verdict,
    waits_from_text,
    waits_of,
    waits_text,
    with_verdicts_reached_early,
)
from rootcause_engine.agent.worker_progress import Usage
from rootcause_engine.worker.progress_beacon import BeaconReading, GroupProgress
from tests.worker_failures import worker_failure

S = 1_000_000_000
NOW = 1_800_000_000 * S
AFTER_S = 60.0
RULE = ProgressRule()


def usage(at_s: float, cpu_s: float = 1.0, io: int = 0, state: str = "S") -> Usage:
    return Usage(taken_s=at_s, taken_ns=NOW - int((100 - at_s) * S), cpu_s=cpu_s, io_bytes=io, state=state)


def still_for(seconds: float) -> ProgressTrack:
    """A track whose last progress was ``seconds`` ago (at look time 100 s)."""
    return ProgressTrack(usage(100 - seconds), 0, usage(100))


def beacon(*groups: GroupProgress, p2p: tuple[CollectivePosition, ...] = ()) -> BeaconReading:
    return BeaconReading(pid=42, written_ns=NOW, written_bytes=0, groups=groups, point_to_point=p2p)


def collective_wait(rank: int, seq: int, waited_s: float, pg: str = "0") -> PeerWait:
    return PeerWait(rank, f"pod-{rank}", CollectivePosition(pg, seq, "gloo:all_reduce", NOW - int(waited_s * S)))


def recv_wait(rank: int, awaited: int, waited_s: float) -> PeerWait:
    return PeerWait(rank, f"pod-{rank}", CollectivePosition("0", 1, "recv", NOW - int(waited_s * S), (awaited,)))


def verdict(rank: int, reading: BeaconReading, track: ProgressTrack, *waits: PeerWait) -> NoProgressVerdict | None:
    return stalled_rank_verdict(rank, reading, track, list(waits), after_s=AFTER_S, now_ns=NOW)


BEHIND = beacon(GroupProgress("0", 4, 4))  # entered and completed collective 4 of group 0


# --- what counts as progress -------------------------------------------------------------------


def test_an_idle_tree_s_cpu_and_page_writes_are_no_progress_however_long() -> None:
    """Measured idle: 0.25 % of a core and a few KB/s of page writes (the beacon's file)."""
    assert not RULE.moved(usage(0), usage(600, cpu_s=1.0 + 0.0025 * 600, io=10_000 * 600), own_bytes=0)


@pytest.mark.parametrize(
    ("cpu_s", "io", "own"),
    [(0.5, 0, 0), (0.0, 4 << 20, 0)],
    ids=["computing-at-5-percent-of-a-core", "writing-4-MB"],
)
def test_cpu_or_io_above_the_idle_rate_is_progress(cpu_s: float, io: int, own: int) -> None:
    assert RULE.moved(usage(0), usage(10, cpu_s=1.0 + cpu_s, io=io), own_bytes=own)


def test_a_main_thread_waiting_for_a_core_is_progress_however_little_cpu_it_gets() -> None:
    """Under 48 busy processes on 2 cores a computing rank got 1.45 % of a core: state R at every look."""
    assert RULE.moved(usage(0), usage(10, cpu_s=1.0, state="R"), own_bytes=0)
    assert not RULE.moved(usage(0), usage(10, cpu_s=1.0, state="D"), own_bytes=0)


def test_a_collective_entered_or_completed_is_progress_though_the_cpu_has_not_shown_it() -> None:
    """Data and tensor parallel: rank 1 waited ten minutes in its tensor-parallel collective for rank
    0's evaluation (next to no CPU); the moment that collective completes it is not still, though
    rank 3 has waited as long for it in their data-parallel group, which rank 1 enters next."""
    waiting = beacon(GroupProgress("1", 8, 7), GroupProgress("2", 3, 3))
    track = ProgressTrack.start(usage(0), 0, waiting.position()).advanced(usage(600, cpu_s=2.0), 0, RULE,
                                                                          waiting.position())
    assert track.still_s == 600
    done = beacon(GroupProgress("1", 8, 8), GroupProgress("2", 3, 3))
    moved = track.advanced(usage(602, cpu_s=2.0), 0, RULE, done.position())
    assert moved.still_s == 0
    assert verdict(1, done, moved, collective_wait(3, 4, 600, pg="2")) is None
    assert track.advanced(usage(602, cpu_s=2.0), 0, RULE, None).still_s == 602  # no beacon read: unknown


def test_the_beacon_s_own_writes_are_not_the_rank_s_progress() -> None:
    assert not RULE.moved(usage(0), usage(10, io=4 << 20), own_bytes=4 << 20)


def test_a_track_keeps_the_time_of_the_last_progress_and_rebases_on_a_counter_that_went_down() -> None:
    track = ProgressTrack.start(usage(0, cpu_s=5.0), 0)
    track = track.advanced(usage(30, cpu_s=4.0), 0, RULE)  # a child left the tree: its CPU went with it
    assert track.still_s == 30 and track.anchor.cpu_s == 4.0
    track = track.advanced(usage(60, cpu_s=4.04), 0, RULE)
    assert track.still_s == 60
    moved = track.advanced(usage(62, cpu_s=6.0), 0, RULE)
    assert moved.still_s == 0 and moved.still_since_ns == usage(62).taken_ns


# --- the rule ----------------------------------------------------------------------------------


def test_a_rank_behind_the_collective_its_peers_wait_in_and_still_is_hung() -> None:
    found = verdict(3, BEHIND, still_for(61), collective_wait(0, 5, 62), collective_wait(1, 5, 61.5))
    assert found is not None
    assert found.stalled == collective_wait(0, 5, 62).position and found.last == CollectivePosition("0", 4)
    assert [wait.rank for wait in found.waits] == [0, 1]  # the longest wait first
    assert found.last_progress_ns == usage(39).taken_ns
    message = found.message()
    assert message.startswith("hung: it made no progress for 61 s (no CPU time, no I/O; process state S (sleeping)) "
                              "while its "
                              "peers waited for it for 62 s in all_reduce #5 of process group 0 (rank 0 on pod-0 since")
    assert "and 1 more" in message and "its last there was collective #4 of process group 0" in message


def test_a_rank_stopped_before_its_beacon_saw_the_default_group_is_hung() -> None:
    """A worker stopped (SIGSTOP) a moment after the group formed left a beacon with no status there:
    it entered none of the default group's collectives, of which every rank is a member; another
    group's wait may not concern it."""
    stopped = beacon()
    found = verdict(3, stopped, still_for(61), collective_wait(0, 5, 62))
    assert found is not None and found.last is None and "it entered none there" in found.message()
    assert verdict(3, stopped, still_for(61), collective_wait(0, 5, 62, pg="1")) is None


@pytest.mark.parametrize(
    ("reading", "still_s", "waits"),
    [
        (BEHIND, 59, [collective_wait(0, 5, 62)]),  # moved 59 s ago
        (BEHIND, 61, [collective_wait(0, 5, 59)]),  # its peers wait since less than after_s
        (BEHIND, 61, [collective_wait(0, 4, 62)]),  # it entered what they wait in
        (BEHIND, 61, [collective_wait(0, 5, 62, pg="1")]),  # no member of that group
        (beacon(GroupProgress("0", 5, 4)), 61, [collective_wait(0, 6, 62)]),  # it waits in a collective itself
        (BEHIND, 61, [collective_wait(3, 5, 62)]),  # its own wait
        (BEHIND, 61, [recv_wait(0, 2, 62)]),  # a receive that waits for another rank
        (None, 61, [collective_wait(0, 5, 62)]),  # no beacon: nothing known of its collectives
    ],
    ids=["moved-recently", "peers-waited-briefly", "entered-it", "not-a-member", "waits-itself", "own-wait",
         "another-rank-awaited", "no-beacon"],
)
def test_no_verdict(reading: BeaconReading | None, still_s: float, waits: list[PeerWait]) -> None:
    assert verdict(3, reading, still_for(still_s), *waits) is None


def test_a_rank_that_a_peer_s_receive_waits_for_is_hung_when_it_is_in_no_call_of_its_own() -> None:
    """A ring of send/recv: gloo's Flight Recorder numbers none; the open call names the peer."""
    found = verdict(3, BEHIND, still_for(70), recv_wait(0, 3, 65))
    assert found is not None and found.stalled.is_point_to_point
    assert "in a point-to-point recv with rank 3 in process group 0" in found.message()
    assert "it was in no torch.distributed call" in found.message()


def test_a_rank_in_a_receive_is_hung_only_when_the_peer_it_waits_for_waits_for_it() -> None:
    """Blocked in a recv from rank 0 while rank 0 waits in the all-reduce it never entered: a cycle,
    and it is the one off the common path. Waiting for a rank that computes (a pipeline stage waiting
    for its input) it is no culprit."""
    receiving = beacon(GroupProgress("0", 4, 4), p2p=(CollectivePosition("0", 1, "recv", NOW - 70 * S, (0,)),))
    found = verdict(3, receiving, still_for(70), collective_wait(0, 5, 65), collective_wait(1, 5, 65))
    assert found is not None and found.waits_for == 0
    assert "its own open send/recv waits for rank 0, which waits for it" in found.message()
    assert verdict(3, receiving, still_for(70), collective_wait(1, 5, 65)) is None


def test_a_rank_waiting_for_a_computing_rank_is_no_culprit_of_its_other_group() -> None:
    """Data and tensor parallel: rank 0 evaluates; rank 1 waits for it in their tensor-parallel group
    (1, open); rank 3 waits for rank 1 in their data-parallel group (2). Rank 1 is still and behind in
    group 2, but waits itself: never hung."""
    rank_1 = beacon(GroupProgress("1", 8, 7), GroupProgress("2", 3, 3))
    assert verdict(1, rank_1, still_for(300), collective_wait(3, 4, 290, pg="2")) is None


# --- the waits in the store: hostile input ------------------------------------------------------


def test_waits_round_trip_through_the_store_value_and_a_beacon_s_waits_are_its_open_calls() -> None:
    reading = beacon(
        GroupProgress("0", 5, 4, since_ns=NOW - S, op="gloo:all_reduce"),
        GroupProgress("1", 2, 1),  # open, but not described yet: no time to measure a wait from
        GroupProgress("2", 7, 7),
        p2p=(CollectivePosition("0", 1, "recv", NOW - 2 * S, (5,)),),
    )
    waits = waits_of(2, "pod-1", reading)
    assert [(w.position.pg, w.position.op) for w in waits] == [("0", "gloo:all_reduce"), ("0", "recv")]
    assert waits_from_text(waits_text(waits).encode()) == tuple(waits)


@pytest.mark.parametrize(
    "value",
    [
        None, b"", b"not json", b"{}", b"[" * 30_000 + b"]" * 30_000, b"x" * (1 << 20),
        json.dumps([{"rank": "3", "worker": "p", "position": {"pg": "0", "seq": 1, "entered_ns": 1}}]).encode(),
        json.dumps([{"rank": 3, "worker": "p", "position": {"pg": "0", "seq": 1}}]).encode(),  # no time
        json.dumps([{"rank": True, "worker": "p", "position": {"pg": "0", "seq": 1, "entered_ns": 1}}]).encode(),
    ],
    ids=["missing", "empty", "not-json", "not-a-list", "deeply-nested", "too-large", "rank-a-string",
         "no-time", "rank-a-bool"],
)
def test_a_malformed_store_value_is_no_wait(value: bytes | None) -> None:
    assert waits_from_text(value) == ()


def test_at_most_max_waits_are_read() -> None:
    many = [collective_wait(rank, 5, 1) for rank in range(MAX_WAITS * 3)]
    assert len(waits_from_text(json.dumps([w.to_json() for w in many]))) == MAX_WAITS


# --- into the diagnosis ------------------------------------------------------------------------


def _failure(pid: int, rank: int, role: Role, timestamp_ns: int) -> WorkerFailure:
    return worker_failure(rank, role=role, timestamp_ns=timestamp_ns, pid=pid, signal_number=15)


def test_a_worker_the_watch_named_becomes_the_root_cause_with_its_probed_stacks() -> None:
    """The workers ended by the watch's teardown are victims by the teardown's rule; the one it named
    is the hung root cause, at its last progress, with the stacks the probe took."""
    found = verdict(3, BEHIND, still_for(61), collective_wait(2, 5, 62))
    assert found is not None
    failures = [_failure(200, 2, Role.VICTIM, NOW), _failure(300, 3, Role.VICTIM, NOW + S)]
    ranked = with_verdicts_reached_early(failures, {300: found}, {300: "File \"train.py\", line 3 in step"})
    assert [(f.pid, f.role) for f in ranked] == [(300, Role.CANDIDATE), (200, Role.VICTIM)]
    assert ranked[0].time_source == TimeSource.LAST_PROGRESS and ranked[0].timestamp_ns == found.last_progress_ns
    assert ranked[0].message.startswith("hung: it made no progress") and "train.py" in ranked[0].traceback
    assert with_verdicts_reached_early(failures, {}, {}) == failures
