"""Agent side: how much a local worker did, read from outside (``/proc``), with no help from its code.

Why: a rank that hangs says nothing. One that computes alone for minutes says nothing either,
while its peers wait for it. What tells them apart is whether the process moves: CPU time spent,
bytes read or written. The kernel keeps both counters for every process, so the training loop needs
no change. A worker's descendants count as the worker. What is read, and the cost:
``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator

from rootcause_engine.agent.thread_wait import UNKNOWN, main_thread_wait

#: The kernel's clock ticks per second (``utime`` and the like are counted in them).
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: Descendants looked at per worker, at most (a runaway fork must not make one look slow).
_MAX_PROCESSES = 256


@dataclasses.dataclass(frozen=True)
class Usage:
    """One look at a worker's process tree: CPU seconds and I/O bytes so far (counters), its own state."""

    taken_s: float  # monotonic
    taken_ns: int  # wall clock
    cpu_s: float
    io_bytes: int
    state: str
    processes: int = 1
    #: the kernel function a stopped (``T``) or uninterruptible (``D``) process waits in
    #: (``/proc/<pid>/wchan``: a driver or filesystem call names itself there); empty otherwise
    wait_channel: str = ""
    #: what the main thread waits in (``agent.thread_wait``: ``io``, ``stuck``, ``unknown``)
    main_wait: str = UNKNOWN

    def describe_state(self) -> str:
        """The process's state in words, with its kernel wait where it says something."""
        words = _STATE_WORDS.get(self.state, self.state)
        return f"{words} in {self.wait_channel}" if self.wait_channel else words


#: What the state letters of ``/proc/<pid>/stat`` mean for a hung rank.
_STATE_WORDS = {
    "R": "R (running)",
    "S": "S (sleeping)",
    "D": "D (uninterruptible: blocked in the kernel, as in a driver or network-filesystem call)",
    "T": "T (stopped by a signal: SIGSTOP, a debugger, or a frozen container)",
    "t": "t (stopped by a debugger)",
    "Z": "Z (ended, not reaped)",
}


def _wait_channel(pid: int) -> str:
    """``/proc/<pid>/wchan``: the kernel function the process sleeps in ("0" or unreadable: nothing)."""
    try:
        with open(f"/proc/{pid}/wchan", encoding="ascii", errors="replace") as handle:
            text = handle.read(128).strip()
    except OSError:
        return ""
    return "" if text in ("", "0") or not text.replace("_", "").isalnum() else text


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, CPU seconds of the process, its threads and its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": the comm may hold spaces
    try:
        state = fields[0]
        ticks = sum(int(fields[index]) for index in (11, 12, 13, 14))  # utime stime cutime cstime
    except (IndexError, ValueError):
        return None
    return state, ticks / _CLOCK_TICKS


def _io_bytes(pid: int) -> int:
    """``rchar + wchar + read_bytes + write_bytes`` of ``pid`` (0 where the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return 0
    total = 0
    for line in lines:
        name, _, value = line.partition(":")
        if name in ("rchar", "wchar", "read_bytes", "write_bytes"):
            try:
                total += int(value)
            except ValueError:
                continue
    return total


def _children(pid: int) -> Iterator[int]:
    """The children of every thread of ``pid`` (``/proc/<pid>/task/<tid>/children``)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                text = handle.read()
        except OSError:
            continue
        for child in text.split():
            if child.isdigit():
                yield int(child)


def process_tree_usage(pid: int) -> Usage | None:
    """The usage of ``pid`` and its descendants now; ``None`` when ``pid`` is gone."""
    own = _stat(pid)
    if own is None:
        return None
    state, cpu_s = own
    io_bytes = _io_bytes(pid)
    seen, pending = {pid}, list(_children(pid))
    while pending and len(seen) < _MAX_PROCESSES:
        child = pending.pop()
        if child in seen:
            continue
        seen.add(child)
        stat = _stat(child)
        if stat is None:
            continue
        cpu_s += stat[1]
        io_bytes += _io_bytes(child)
        pending.extend(_children(child))
    wait_channel = _wait_channel(pid) if state in ("D", "T", "t") else ""
    main_wait = main_thread_wait(pid) if state != "R" else UNKNOWN
    return Usage(time.monotonic(), time.time_ns(), cpu_s, io_bytes, state, len(seen), wait_channel, main_wait)
