"""The testimony line: written by a pod, read back exactly, and never trusted when it is malformed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rootcause_core.testimony import (
    LOST_POD_STAMP_DELAY_NS,
    MAX_TESTIMONY_CHARS,
    TESTIMONY_TAG,
    VICTIM_STAMP_DELAY_NS,
    LostPod,
    Member,
    PodTestimony,
    describe_lost_pod,
    for_failure,
    for_lost_pod,
    read_testimony,
    with_testimony,
)

NS = st.integers(min_value=-(2**62), max_value=2**62)
COUNT = st.integers(min_value=0, max_value=10_000)
NAMES = st.text(max_size=40)
MEMBERS = st.lists(st.builds(Member, COUNT, NAMES, COUNT, COUNT, st.booleans()), max_size=6).map(tuple)
LOST = st.lists(st.builds(LostPod, COUNT, NAMES, st.none() | NS), max_size=3).map(tuple)


@given(failed_at=st.none() | NS, victim=st.booleans(), report=st.text())
def test_what_a_pod_writes_is_what_a_reader_reads(failed_at: int | None, victim: bool, report: str) -> None:
    testimony = for_failure(failed_at, victim=victim)
    assert read_testimony(with_testimony(report, testimony)) == testimony


@given(failed_at=st.none() | NS, victim=st.booleans(), members=MEMBERS, lost=LOST, report=st.text())
def test_what_a_pod_says_of_its_peers_is_read_back_exactly(
    failed_at: int | None, victim: bool, members: tuple[Member, ...], lost: tuple[LostPod, ...], report: str
) -> None:
    testimony = for_failure(failed_at, victim=victim, members=members, lost=lost)
    line = testimony.line()
    assert "\n" not in line and line.isascii()  # any worker name stays on one line
    assert read_testimony(with_testimony(report, testimony)) == testimony


def test_a_document_for_a_lost_pod_sorts_between_a_root_cause_and_a_victim_under_the_go_rule() -> None:
    """Stamps: a real root cause at its failure, a lost pod 30 s after its peers lost it, a victim
    60 s after its failure; the true time (last seen alive) travels in the testimony."""
    peer = LostPod(0, "train-worker-0", last_seen_ns=900)
    said = for_lost_pod(peer, noticed_ns=1_000, reported_by="train-worker-1")
    assert said.failed_at_ns == 900 and said.stamped_ns() == 1_000 + LOST_POD_STAMP_DELAY_NS
    assert for_failure(1_000, victim=False).stamped_ns() < said.stamped_ns()
    assert said.stamped_ns() < for_failure(1_000, victim=True).stamped_ns()
    never_seen = for_lost_pod(LostPod(0, "w", None), noticed_ns=1_000, reported_by="x")
    assert (never_seen.failed_at_ns, never_seen.stamped_ns()) == (1_000, 1_000 + LOST_POD_STAMP_DELAY_NS)
    assert read_testimony(said.line()) == said


def test_a_large_membership_is_left_out_but_counted_and_the_line_stays_bounded() -> None:
    members = tuple(Member(i, "pod-" + "x" * 60, 8 * i, 8) for i in range(512))
    said = for_failure(5, victim=True, members=members, lost=(LostPod(3, members[3].worker, 4),))
    line = said.line()
    assert len(line) <= MAX_TESTIMONY_CHARS
    back = read_testimony(line)
    assert back is not None and back.members == () and back.member_count == 512 and back.lost == said.lost


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("members", [[0, "a", 0, 2, 1], [1, 2, 3, 4, 0], "junk", [1, "b", -1, 2, 0], [2, "c", 4, 2, 7]]),
        ("lost", [[0, "a", 5], [1, "b", "soon"], [True, "c", 1], [2, "d", None]]),
    ],
)
def test_invalid_peer_entries_are_dropped_one_by_one(field: str, value: list[object]) -> None:
    line = TESTIMONY_TAG + json.dumps({"failed_at_ns": 1, "stamp_delay_ns": 0, field: value})
    said = read_testimony(line)
    assert said is not None
    if field == "members":
        assert said.members == (Member(0, "a", 0, 2, True),)
    else:
        assert said.lost == (LostPod(0, "a", 5), LostPod(2, "d", None))


def test_a_lost_pod_is_described_for_a_person() -> None:
    peer = LostPod(2, "train-worker-2", 1_790_000_000_000_000_000)
    text = describe_lost_pod(peer, noticed_ns=1_790_000_001_500_000_000, reported_by="train-worker-0")
    assert text.startswith("pod train-worker-2 (group rank 2) is lost: no error file from this pod")
    assert "at 2026-09-21T14:13:21.500000000Z (reported by train-worker-0)" in text
    assert "last seen alive at 2026-09-21T14:13:20.000000000Z" in text
    assert "a lost or frozen node, a network partition, preemption or pod eviction" in text
    beyond_calendars = 10**21  # a corrupt heartbeat, say: past the year 9999
    assert f"{beyond_calendars} ns" in describe_lost_pod(LostPod(0, "w", beyond_calendars), noticed_ns=0)


def test_a_victim_is_stamped_after_its_failure_a_candidate_at_it() -> None:
    assert for_failure(10, victim=True).stamped_ns() == 10 + VICTIM_STAMP_DELAY_NS
    assert for_failure(10, victim=False).stamped_ns() == 10
    assert for_failure(None, victim=True).stamped_ns() is None


def test_the_line_is_compact_and_versioned() -> None:
    line = PodTestimony(failed_at_ns=1790000000123456789, stamp_delay_ns=60_000_000_000).line()
    assert line == '[rootcause testimony v1] {"failed_at_ns":1790000000123456789,"stamp_delay_ns":60000000000}'


@pytest.mark.parametrize(
    "message",
    [
        "",
        "[root cause] boom",
        f"{TESTIMONY_TAG}{{\"failed_at_ns\":1}}\nanother line after it",  # not the last line
        f"x\n{TESTIMONY_TAG}not json",
        f"x\n{TESTIMONY_TAG}[1, 2]",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":\"1\"}}",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":true}}",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":1.5}}",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":1,\"stamp_delay_ns\":-5}}",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":{2**70}}}",
        f"x\n{TESTIMONY_TAG}{{\"failed_at_ns\":1,\"pad\":\"{'a' * MAX_TESTIMONY_CHARS}\"}}",
        "x\n[rootcause testimony v9] {\"failed_at_ns\":1}",
    ],
)
def test_anything_but_a_valid_last_line_is_no_testimony(message: str) -> None:
    assert read_testimony(message) is None


@given(st.text())
def test_any_text_is_read_without_an_exception(message: str) -> None:
    read_testimony(message)
