"""A victim's pod waits, bounded, for a document that can name the root cause before it exits."""

from __future__ import annotations

import itertools

from flytekitplugins_rootcause.entrypoint.root_cause_wait import await_root_cause_document, names_the_root_cause

VICTIM = "error-pod-0-0123abcd.rc1v1790000000000000000.pb"
CANDIDATE = "error-pod-1-4567cdef.rc1c1790000000000000001.pb"
LOST = "error-pod-2-89abcdef.rc1l1790000000000000002.pb"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_which_files_can_name_the_root_cause() -> None:
    assert names_the_root_cause(CANDIDATE) and names_the_root_cause(LOST)
    assert names_the_root_cause("error-pod-3-0a0b.pb")  # no key: it may say anything
    assert not names_the_root_cause(VICTIM)
    assert not names_the_root_cause("error.pb")  # a copy of the first pod's document
    assert not names_the_root_cause("outputs.pb")


def test_the_wait_ends_when_the_culprit_s_document_appears() -> None:
    clock = FakeClock()
    listings = itertools.chain([[VICTIM], [VICTIM, "error.pb"]], itertools.repeat([VICTIM, CANDIDATE]))
    assert await_root_cause_document(lambda: next(listings), bound_s=10, clock=clock, sleep=clock.sleep)
    assert clock.now == 0.4


def test_the_wait_is_bounded_and_a_failing_listing_never_raises() -> None:
    clock = FakeClock()

    def listing() -> list[str]:
        raise OSError("503 Slow Down")

    assert not await_root_cause_document(listing, bound_s=2, clock=clock, sleep=clock.sleep)
    assert 2 <= clock.now <= 2.2


def test_a_backend_reading_only_error_pb_needs_it_there_too() -> None:
    """The culprit's pod creates ``error.pb`` after its own file: a victim waits for both."""
    clock = FakeClock()
    listings = iter([[VICTIM, CANDIDATE], [VICTIM, CANDIDATE, "error.pb"]])
    assert await_root_cause_document(
        lambda: next(listings), bound_s=10, with_error_pb=True, clock=clock, sleep=clock.sleep
    )
    assert clock.now == 0.2
