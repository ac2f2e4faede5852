"""A victim's pod waits, bounded, for a document that can name the root cause before it exits."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

from flyteidl.core import errors_pb2
from flytekit.exceptions.system import FlyteSystemException

from flytekitplugins_rootcause.entrypoint.command import _ErrorFileRouter
from flytekitplugins_rootcause.entrypoint.error_documents import ErrorFilePolicy
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


# --- the agent watchdog's road: the same wait -----------------------------------------------------------


class _HungVictim(FlyteSystemException):
    """What the watchdog reports for an agent that hung after its workers were torn down: a victim."""

    report = "[victim] agent hung: rank 3 never entered allreduce"


def _router(tmp_path: Path, wait_s: float) -> _ErrorFileRouter:
    return _ErrorFileRouter(
        put_data=lambda *args, **kwargs: None,
        engine_dir=str(tmp_path / "engine"),
        worker="pod-0",
        planner=None,  # type: ignore[arg-type]  # the staged road is not taken here
        policy=ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=True),
        filesystems=None,  # type: ignore[arg-type]  # a local prefix needs no store
        root_cause_wait_s=wait_s,
    )


def test_the_watchdog_s_victim_document_leaves_error_pb_to_the_culprit(tmp_path: Path) -> None:
    """The watchdog's document names only a victim: the pod writes its own file, waits for the
    culprit's pod's file and ``error.pb``, and leaves ``error.pb`` as the culprit made it."""
    prefix = tmp_path / "prefix"
    prefix.mkdir()

    def culprit_writes() -> None:
        time.sleep(0.5)
        (prefix / CANDIDATE).write_bytes(b"culprit")
        (prefix / "error.pb").write_bytes(b"culprit")

    culprit = threading.Thread(target=culprit_writes)
    culprit.start()
    began = time.monotonic()
    _router(tmp_path, wait_s=30).write_last_resort(str(prefix), _HungVictim("hung"))
    culprit.join()
    assert time.monotonic() - began < 20
    assert (prefix / "error.pb").read_bytes() == b"culprit"
    own = [name for name in os.listdir(prefix) if name.startswith("error-pod-0-")]
    assert len(own) == 1 and ".rc1v" in own[0], os.listdir(prefix)


def test_the_watchdog_s_victim_document_makes_error_pb_when_no_culprit_writes(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    _router(tmp_path, wait_s=1).write_last_resort(str(prefix), _HungVictim("hung"))
    shared = errors_pb2.ErrorDocument.FromString((prefix / "error.pb").read_bytes())
    assert shared.error.message.startswith("[victim] agent hung"), shared.error.message


def test_a_candidate_that_the_pods_agreed_came_second_waits_for_the_first_pod_s_document() -> None:
    """Two independent failures in two pods: the pods agreed the other pod's came first, so this
    pod's own candidate document does not count; only a document written for that pod does."""
    clock = FakeClock()
    own = "error-pod-0-0123abcd.rc1c1790000000000000009.pb"
    listings = itertools.chain([[own], [own, "error.pb"]], itertools.repeat([own, CANDIDATE, "error.pb"]))
    assert await_root_cause_document(lambda: next(listings), bound_s=10, with_error_pb=True, from_worker="pod-1",
                                     clock=clock, sleep=clock.sleep)
    assert clock.now == 0.4
    assert not await_root_cause_document(lambda: [own, "error.pb"], bound_s=1, from_worker="pod-1", clock=clock,
                                         sleep=clock.sleep)
