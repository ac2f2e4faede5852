"""An I/O wait told apart from a stuck program (issue 50, item 8): real processes, their main thread's
state, kernel wait and system call (``agent.thread_wait``), and the hang watch's decision on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.diagnosis.stalled_rank import PeerWait, ProgressRule, ProgressTrack, waits_text
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch, hang_settings
from rootcause_engine.agent.thread_wait import IO, STUCK, UNKNOWN, classify_wait, main_thread_wait
from rootcause_engine.agent.worker_progress import Usage
from rootcause_engine.settings import DEFAULT_IO_WAIT_AFTER_S
from rootcause_engine.worker.progress_beacon import GroupProgress
from tests.rootcause_engine.agent.test_hang_watch import _Ledger, _looks, _Peers, _worker

S = 1_000_000_000
_FIFO_READ = "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.read(fd, 1)\nimport time; time.sleep(60)"
_SLEEP = "import time; time.sleep(60)"
_LOCK = (
    "import threading, time\nlock = threading.Lock()\nheld = threading.Event()\n"
    "def hold():\n    lock.acquire(); held.set(); time.sleep(120)\n"
    "threading.Thread(target=hold, daemon=True).start()\nheld.wait()\nlock.acquire()"
)


@pytest.fixture()
def fifo(tmp_path: Path) -> Iterator[str]:
    """A FIFO with a writer held open (by this test) that writes nothing: a read from it blocks."""
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR)
    try:
        yield path
    finally:
        os.close(writer)


def _start(processes: list[subprocess.Popen[bytes]], code: str, *args: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code, *args])
    processes.append(process)
    return process


def _settled(pid: int, expected: str, seconds: float = 60.0) -> str:
    """The main thread's wait once it is ``expected`` (a busy machine may take long to start Python)."""
    deadline = time.monotonic() + seconds
    wait = main_thread_wait(pid)
    while wait != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        wait = main_thread_wait(pid)
    return wait


def test_a_fifo_read_is_an_io_wait_and_a_sleep_a_lock_and_a_stop_are_stuck(
    fifo: str, processes: list[subprocess.Popen[bytes]]
) -> None:
    reading = _start(processes, _FIFO_READ, fifo)
    asleep = _start(processes, _SLEEP)
    locked = _start(processes, _LOCK)
    assert _settled(reading.pid, IO) == IO
    assert _settled(asleep.pid, STUCK) == STUCK
    assert _settled(locked.pid, STUCK) == STUCK
    time.sleep(0.5)  # they stay so
    assert [main_thread_wait(p.pid) for p in (reading, asleep, locked)] == [IO, STUCK, STUCK]
    os.kill(reading.pid, signal.SIGSTOP)  # a frozen process, even one stopped inside a read
    assert _settled(reading.pid, STUCK) == STUCK
    os.kill(reading.pid, signal.SIGCONT)
    assert _settled(reading.pid, IO) == IO


def test_a_vanished_or_unreadable_process_is_unknown_without_an_exception(processes: list[Any]) -> None:
    gone = _start(processes, "pass")
    gone.wait()
    assert main_thread_wait(gone.pid) == UNKNOWN
    assert main_thread_wait(2**22 + 12345) == UNKNOWN


def test_the_classification_rule() -> None:
    assert classify_wait("S", "anon_pipe_read", None) == IO
    assert classify_wait("D", "rpc_wait_bit_killable", None) == IO
    assert classify_wait("D", "folio_wait_bit_common", None) == IO
    assert classify_wait("S", "futex_wait_queue", 202) == STUCK
    assert classify_wait("S", "hrtimer_nanosleep", 230) == STUCK
    assert classify_wait("T", "do_signal_stop", 0) == STUCK
    assert classify_wait("R", "", None) == UNKNOWN
    assert classify_wait("S", "", None) == UNKNOWN
    assert classify_wait("Z", "anon_pipe_read", 0) == UNKNOWN


def _usage(at_s: float, main_wait: str) -> Usage:
    return Usage(taken_s=at_s, taken_ns=int(at_s * S), cpu_s=1.0, io_bytes=0, state="S", main_wait=main_wait)


def test_the_end_of_an_io_wait_is_progress() -> None:
    """A read that returned after 90 s (one byte read, then straight into a collective whose beacon beat
    is still to come): the rank is not still for 90 s at the next look."""
    track = ProgressTrack.start(_usage(0, IO), 0)
    track = track.advanced(_usage(90, IO), 0, ProgressRule())
    assert track.still_s == 90
    assert track.advanced(_usage(92, STUCK), 0, ProgressRule()).still_s == 0


def _watch_one(tmp_path: Path, process: subprocess.Popen[bytes]) -> HangWatch:
    """A watch of ``process`` (rank 0, behind in collective 5 of group 0) whose peer pod's rank 2 waits
    there since 30 s; ``hang_after_s`` 2 s, ``io_wait_after_s`` 30 s."""
    tmp_path.mkdir()
    store = dist.HashStore()
    since = time.time_ns() - 30 * S
    store.set("rootcause/hang/wait/1", waits_text([PeerWait(2, "pod-1", CollectivePosition("0", 5, "gloo:all_reduce",
                                                                                            since))]))
    worker = _worker(tmp_path, process, 0, GroupProgress("0", 4, 4))
    return HangWatch(_Ledger([worker]), _Peers(store), HangSettings(after_s=2.0, io_wait_after_s=30.0),  # type: ignore[arg-type]
                     worker_name="pod-0")


def test_a_rank_blocked_in_a_read_is_given_the_io_limit_and_a_sleeping_one_is_named(
    tmp_path: Path, fifo: str, processes: list[subprocess.Popen[bytes]]
) -> None:
    reading = _start(processes, _FIFO_READ, fifo)
    asleep = _start(processes, _SLEEP)
    assert _settled(reading.pid, IO) == IO and _settled(asleep.pid, STUCK) == STUCK
    assert _looks(_watch_one(tmp_path / "io", reading), 5.0) == {}  # still for 5 s > 2 s: an I/O wait
    found = _looks(_watch_one(tmp_path / "sleep", asleep), 5.0)
    assert list(found) == [asleep.pid] and found[asleep.pid].still_s >= 2


def test_io_wait_after_s_reaches_the_watch_and_is_checked() -> None:
    assert hang_settings(ElasticRootCause(nnodes=2)).io_wait_after_s == DEFAULT_IO_WAIT_AFTER_S == 600  # type: ignore[union-attr]
    assert hang_settings(ElasticRootCause(nnodes=2, io_wait_after_s=120)).io_wait_after_s == 120  # type: ignore[union-attr]
    for value in (5, True, float("nan"), "600"):
        with pytest.raises(ValueError, match="io_wait_after_s must be >= 10"):
            ElasticRootCause(nnodes=2, io_wait_after_s=value)  # type: ignore[arg-type]
