"""The worker's progress beacon outlives a beat that raises, and a beacon whose thread dies says so
and takes its file away (issue 50, item 4: ``rootcause_engine/thread_guard.py``)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from rootcause_engine.thread_guard import GuardedLoop
from rootcause_engine.worker.progress_beacon import ProgressBeacon, read_beacon
from testbed.sync import wait_until

pytestmark = pytest.mark.timeout(120)

WAIT_S = 60.0
GUARD_LOGGER = "rootcause_engine.thread_guard"


class _Status:
    """torch's per-group status, whose first ``broken`` reads raise what nobody expected."""

    def __init__(self, broken: int) -> None:
        self.broken = broken
        self.reads = 0

    def __call__(self) -> dict[str, tuple[int, int]]:
        self.reads += 1
        if self.reads <= self.broken:
            raise UnicodeError("label too long (a bug no check foresaw)")
        return {"0": (4, 4)}


def _tracebacks(caplog: pytest.LogCaptureFixture, level: int, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.levelno == level and record.exc_info and name in record.getMessage()]


def test_a_beat_that_raises_costs_that_beat_is_logged_once_and_the_beacon_beats_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The first two beats raise (they used to be swallowed without a word): one traceback in the
    worker's log, and the next beat writes the file."""
    status = _Status(broken=2)
    path = tmp_path / "progress.json"
    beacon = ProgressBeacon(str(path), status=status, entries=lambda: [], open_calls=lambda: [])
    loop = GuardedLoop("rootcause-worker-watch")
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
        beacon.start(0.05, loop)
        try:
            assert wait_until(lambda: read_beacon(str(path)) is not None, WAIT_S), "the beacon never wrote"
        finally:
            beacon.stop()
            loop.stop(WAIT_S)
    reading = read_beacon(str(path))
    assert reading is not None and reading.pid == os.getpid() and [g.entered for g in reading.groups] == [4]
    [traceback] = _tracebacks(caplog, logging.ERROR, "progress beacon")
    assert traceback.exc_info[0] is UnicodeError  # type: ignore[index]
    note = beacon.beats.note()
    assert note is not None and "(2 iterations failed in all)" in note


class _Broken(threading.Event):
    """The watch thread's wake-up event, whose wait raises: the loop itself breaks after a beat."""

    def wait(self, timeout: float | None = None) -> bool:
        raise RuntimeError("the loop itself broke")


def test_a_beacon_whose_thread_dies_is_logged_critical_and_leaves_no_stale_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its thread dies after one beat: the death is logged at critical level, and the file is
    removed, so that the agent's hang watch does not take its last beat for a rank that stopped."""
    path = tmp_path / "progress.json"
    beacon = ProgressBeacon(str(path), status=_Status(broken=0), entries=lambda: [], open_calls=lambda: [])
    loop = GuardedLoop("rootcause-worker-watch")
    loop._woken = _Broken()
    with caplog.at_level(logging.DEBUG, logger=GUARD_LOGGER):
        beacon.start(0.05, loop)
        assert wait_until(lambda: not loop.running, WAIT_S)
    assert beacon.written_bytes > 0 and not path.exists()  # it beat once, then its file went with it
    [death] = _tracebacks(caplog, logging.CRITICAL, "rootcause-worker-watch")
    assert death.exc_info[0] is RuntimeError  # type: ignore[index]
    note = beacon.beats.note()
    assert note is not None and "progress beacon stopped at " in note
