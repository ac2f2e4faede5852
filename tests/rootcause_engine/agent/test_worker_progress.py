"""A worker's progress read from ``/proc`` (``rootcause_engine/agent/worker_progress.py``): the state of its
process, the CPU of its reaped children, the descendants counted, odd process names; real child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rootcause_engine.agent.thread_wait import STUCK, UNKNOWN
from rootcause_engine.agent.worker_progress import Usage, process_tree_usage

#: Far longer than any wait below needs on a loaded machine; a test that gets there fails.
PATIENCE_S = 60.0


@pytest.fixture
def start() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start a process in a session of its own; the whole session is killed and reaped at the end."""
    started: list[subprocess.Popen[str]] = []

    def start_one(code: str, executable: str = sys.executable) -> subprocess.Popen[str]:
        process = subprocess.Popen([executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True)
        started.append(process)
        return process

    yield start_one
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def _until(pid: int, wanted: Callable[[Usage], bool]) -> Usage:
    """The first look at ``pid`` that shows what is wanted (a busy machine may take a while to get there)."""
    deadline = time.monotonic() + PATIENCE_S
    usage = process_tree_usage(pid)
    while usage is not None and not wanted(usage) and time.monotonic() < deadline:
        time.sleep(0.02)
        usage = process_tree_usage(pid)
    assert usage is not None and wanted(usage), usage
    return usage


def test_the_state_letters_are_described_in_words_with_the_kernel_wait_where_there_is_one() -> None:
    asleep = Usage(0.0, 0, 0.0, 0, "S")
    assert asleep.describe_state() == "S (sleeping)"
    assert Usage(0.0, 0, 0.0, 0, "D", wait_channel="nfs_wait_bit_killable").describe_state() == (
        "D (uninterruptible: blocked in the kernel, as in a driver or network-filesystem call) in nfs_wait_bit_killable"
    )
    assert Usage(0.0, 0, 0.0, 0, "Z").describe_state() == "Z (ended, not reaped)"
    assert Usage(0.0, 0, 0.0, 0, "I").describe_state() == "I"  # a letter with no words: as the kernel gives it
    assert (asleep.processes, asleep.wait_channel, asleep.main_wait) == (1, "", UNKNOWN)


def test_this_process_reads_as_running_with_its_own_cpu_and_no_thread_wait() -> None:
    usage = process_tree_usage(os.getpid())
    assert usage is not None
    assert usage.state == "R" and usage.main_wait == UNKNOWN and usage.wait_channel == ""
    assert usage.cpu_s > 0 and usage.io_bytes > 0


def test_a_sleeping_worker_is_stuck_in_its_sleep(start: Callable[..., subprocess.Popen[str]]) -> None:
    process = start("import time; print('ready', flush=True); time.sleep(60)")
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    usage = _until(process.pid, lambda usage: usage.state == "S" and usage.main_wait == STUCK)
    assert (usage.processes, usage.wait_channel) == (1, "")  # a sleeping process's wait is not read: S says it
    assert usage.describe_state() == "S (sleeping)"


def test_the_cpu_of_children_it_reaped_counts_as_its_own(start: Callable[..., subprocess.Popen[str]]) -> None:
    burn = "import time\nwhile time.process_time() < 0.3: pass"
    parent = start(f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); "
                   "print('reaped', flush=True); time.sleep(60)")
    assert parent.stdout is not None and parent.stdout.readline() == "reaped\n"
    usage = process_tree_usage(parent.pid)
    assert usage is not None and usage.processes == 1
    assert usage.cpu_s >= 0.25


def test_every_descendant_counts_not_only_the_children(start: Callable[..., subprocess.Popen[str]]) -> None:
    sleeper = "import time; time.sleep(60)"
    middle = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleeper!r}]); time.sleep(60)"
    top = start(f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {middle!r}]); time.sleep(60)")
    usage = _until(top.pid, lambda usage: usage.processes == 3)
    assert usage.processes == 3


def test_an_ended_worker_not_yet_reaped_reads_as_a_zombie_with_its_cpu(
    start: Callable[..., subprocess.Popen[str]],
) -> None:
    process = start("import time\nwhile time.process_time() < 0.1: pass")
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, left unreaped
    usage = process_tree_usage(process.pid)
    assert usage is not None and usage.state == "Z"
    assert usage.describe_state() == "Z (ended, not reaped)"
    assert usage.cpu_s >= 0.05 and usage.processes == 1
    process.wait()
    assert process_tree_usage(process.pid) is None


def test_a_process_name_with_spaces_and_parentheses_is_read_right(
    tmp_path: Path, start: Callable[..., subprocess.Popen[str]]
) -> None:
    """``/proc/<pid>/stat`` puts the name in parentheses; one holding ``) (`` must not shift the fields."""
    odd = tmp_path / "a) (b c"
    odd.symlink_to(os.path.realpath(sys.executable))
    process = start("import time\nwhile time.process_time() < 0.2: pass\nprint('ready', flush=True)\ntime.sleep(60)",
                    executable=str(odd))
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    with open(f"/proc/{process.pid}/comm", encoding="ascii") as comm:
        assert comm.read().strip() == "a) (b c"
    usage = _until(process.pid, lambda usage: usage.state == "S")
    assert usage.cpu_s >= 0.15
