"""The testimony line: written by a pod, read back exactly, and never trusted when it is malformed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rootcause_core.testimony import (
    MAX_TESTIMONY_CHARS,
    TESTIMONY_TAG,
    VICTIM_STAMP_DELAY_NS,
    PodTestimony,
    for_failure,
    read_testimony,
    with_testimony,
)

NS = st.integers(min_value=-(2**62), max_value=2**62)


@given(failed_at=st.none() | NS, victim=st.booleans(), report=st.text())
def test_what_a_pod_writes_is_what_a_reader_reads(failed_at: int | None, victim: bool, report: str) -> None:
    testimony = for_failure(failed_at, victim=victim)
    assert read_testimony(with_testimony(report, testimony)) == testimony


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
