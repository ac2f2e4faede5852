"""The beacon's monotonic times (issue 50): when a rank entered a wait, on the clock the agent of its
host times waits with, unmoved by a wall-clock step; and the bounded parsing of those times."""

from __future__ import annotations

import json

import pytest

from rootcause_core.collectives import MAX_MONO_NS, CollectivePosition
from rootcause_engine.worker.progress_beacon import BeaconReading, GroupProgress, ProgressBeacon

S = 1_000_000_000


class _Node:
    """Stands in for torch (group 0's status, its ring, the open send/recv) and the host's clocks."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_800_000_000 * S, 50 * S
        self.entered, self.created = 4, 0
        self.calls: list[CollectivePosition] = []

    def tick(self, seconds: float, step_s: float = 0) -> None:
        self.mono += int(seconds * S)
        self.wall += int((seconds + step_s) * S)

    def beacon(self) -> ProgressBeacon:
        return ProgressBeacon(
            "/nonexistent/progress.json",
            status=lambda: {"0": (self.entered, 4)},
            entries=lambda: [{"pg_id": "0", "collective_seq_id": self.entered, "profiling_name": "gloo:all_reduce",
                              "time_created_ns": self.created}],
            open_calls=lambda: self.calls,
            wall_ns=lambda: self.wall,
            mono_ns=lambda: self.mono,
        )


@pytest.mark.parametrize(
    ("step_s", "entered_mono_s"),
    [(0, 51.5), (100, 50.0), (-100, 52.0)],
    ids=["no-step", "wall-stepped-ahead-before-the-beat-saw-it", "wall-stepped-back-before-the-beat-saw-it"],
)
def test_a_collective_s_monotonic_start_is_its_ring_age_kept_within_the_beat_that_first_saw_it(
    step_s: float, entered_mono_s: float
) -> None:
    """Beats at monotonic 50 s and 52 s; the rank entered collective 5 at 51.5 s (the ring's wall
    time). A wall-clock step between its entering and the beat that saw it moves the monotonic
    start by at most the beat's interval (never before the previous beat, never after the sighting);
    a step after the sighting moves nothing."""
    node = _Node()
    beacon = node.beacon()
    beacon.reading()  # at 50 s: nothing open
    node.tick(1.5)
    node.entered, node.created = 5, node.wall
    node.tick(0.5, step_s)
    first = beacon.reading().groups[0]
    assert first.since_mono_ns == 52 * S  # first seen open: entered by now
    node.tick(2, step_s=30)  # a step after the sighting
    described = beacon.reading().groups[0]
    assert described.since_ns == node.created and described.op == "gloo:all_reduce"
    assert described.since_mono_ns == int(entered_mono_s * S)
    node.tick(2, step_s=-60)
    assert beacon.reading().groups[0].since_mono_ns == described.since_mono_ns
    assert described.position().entered_mono_ns == described.since_mono_ns


def test_a_send_or_recv_s_monotonic_start_is_kept_while_it_stays_open() -> None:
    node = _Node()
    beacon = node.beacon()
    beacon.reading()
    node.tick(2)
    node.calls = [CollectivePosition("0", 1, "recv", node.wall - int(0.5 * S), (2,))]
    [call] = beacon.reading().point_to_point
    assert call.entered_mono_ns == int(51.5 * S)
    node.tick(2, step_s=100)
    assert beacon.reading().point_to_point[0].entered_mono_ns == int(51.5 * S)
    node.calls = [CollectivePosition("0", 2, "recv", node.wall - 500 * S, (2,))]  # a stepped clock's age
    node.tick(2)
    assert beacon.reading().point_to_point[0].entered_mono_ns == 54 * S  # not before the previous beat


def test_the_monotonic_times_survive_the_file_and_old_files_read_without_them() -> None:
    group = GroupProgress("0", 5, 4, since_ns=7, op="gloo:x", since_mono_ns=9)
    call = CollectivePosition("0", 1, "recv", 7, (2,), entered_mono_ns=8)
    reading = BeaconReading(1, 2, 3, (group,), (call,))
    parsed = BeaconReading.from_json(json.loads(json.dumps(reading.to_json())))
    assert parsed == reading and parsed.groups[0].since_mono_ns == 9 and parsed.point_to_point[0].entered_mono_ns == 8
    assert GroupProgress.from_json({"pg": "0", "entered": 5, "completed": 4, "since_ns": 7}) == GroupProgress(
        "0", 5, 4, since_ns=7)
    assert "entered_mono_ns" not in CollectivePosition("0", 1, "recv", 7, (2,)).to_json()  # as before


@pytest.mark.parametrize("forged", [-1, MAX_MONO_NS + 1, "9", True, 9.0, 10**30],
                         ids=["negative", "past-int64", "a-string", "a-bool", "a-float", "huge"])
def test_a_monotonic_time_that_is_no_int64_reading_costs_its_entry(forged: object) -> None:
    assert GroupProgress.from_json({"pg": "0", "entered": 5, "completed": 4, "since_mono_ns": forged}) is None
    assert CollectivePosition.from_json({"pg": "0", "seq": 1, "op": "recv", "entered_mono_ns": forged}) is None
    assert GroupProgress.from_json({"pg": "0", "entered": 5, "completed": 4, "since_mono_ns": MAX_MONO_NS}) is not None
