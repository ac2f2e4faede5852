"""Agent side: what a worker's main thread waits in, from ``/proc``: a read or write that will return
(``io``), or a program that is stuck (``stuck``).

Why: a rank blocked in a read from a stalled filesystem spends no CPU and counts no I/O. So does a
rank asleep in user code or deadlocked on a lock. The counters of :mod:`.worker_progress` cannot
tell them apart, but the kernel can. :func:`classify_wait` is the pure rule, and
:func:`main_thread_wait` reads ``/proc`` for it. The hang watch gives an ``io`` wait its own, longer
limit. What is read: ``docs/design.md``.
"""

from __future__ import annotations

import os
import platform

#: The main thread waits in a read or write of a file, a pipe or a network filesystem.
IO = "io"
#: It sleeps in user code, waits on a lock (futex), waits for events (poll), or is stopped.
STUCK = "stuck"
#: Anything else, or nothing could be read.
UNKNOWN = "unknown"

#: Kernel functions (``wchan``, by prefix or substring) a thread waits in for file, pipe or storage I/O.
_IO_CHANNEL_PREFIXES = (
    "nfs", "rpc_", "io_schedule", "folio_wait", "wait_on_page", "__folio_lock", "__lock_page", "blk_", "jbd2",
    "fuse_", "bit_wait_io", "wait_on_buffer", "__wait_on_buffer", "fifo_open", "wait_for_partner",
    "ceph_", "cifs_", "smb", "xfs_", "ext4_", "btrfs_", "ovl_", "v9fs_", "p9_", "lustre", "ll_", "ptlrpc",
)
_IO_CHANNEL_PARTS = ("pipe_read", "pipe_write", "pipe_wait", "io_schedule", "folio_wait", "wait_on_page")
#: Kernel functions a thread waits in when asleep, on a lock, or stopped.
_STUCK_CHANNEL_PARTS = (
    "futex", "nanosleep", "do_signal_stop", "ptrace_stop", "sigsuspend", "sigtimedwait", "do_wait", "pause",
)

#: System call numbers of reads and writes (and opens, syncs, stats: a network filesystem blocks in
#: them too), and of sleeps, locks and event waits, per architecture.
_SYSCALLS = {
    "x86_64": (
        # read write open close stat fstat lstat pread64 pwrite64 readv writev sendfile fsync fdatasync
        # getdents64 splice sync_file_range openat newfstatat preadv pwritev copy_file_range preadv2
        # pwritev2 statx openat2
        frozenset({0, 1, 2, 3, 4, 5, 6, 17, 18, 19, 20, 40, 74, 75, 217, 275, 277, 257, 262, 295, 296, 326,
                   327, 328, 332, 437}),
        # poll select nanosleep pause wait4 rt_sigtimedwait rt_sigsuspend futex epoll_wait clock_nanosleep
        # pselect6 ppoll epoll_pwait epoll_pwait2 futex_waitv
        frozenset({7, 23, 35, 34, 61, 128, 130, 202, 232, 230, 270, 271, 281, 441, 449}),
    ),
    "aarch64": (
        # openat close getdents64 read write readv writev pread64 pwrite64 preadv pwritev sendfile splice
        # newfstatat fstat fsync fdatasync sync_file_range copy_file_range preadv2 pwritev2 statx openat2
        frozenset({56, 57, 61, 63, 64, 65, 66, 67, 68, 69, 70, 71, 76, 79, 80, 82, 83, 84, 285, 286, 287, 291,
                   437}),
        # epoll_pwait pselect6 ppoll futex nanosleep clock_nanosleep rt_sigsuspend rt_sigtimedwait wait4
        # epoll_pwait2 futex_waitv
        frozenset({22, 72, 73, 98, 101, 115, 133, 137, 260, 441, 449}),
    ),
}
_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
_IO_SYSCALLS, _STUCK_SYSCALLS = _SYSCALLS.get(_MACHINE, (frozenset(), frozenset()))


def classify_wait(state: str, wait_channel: str, syscall: int | None, fd_kind: str = "") -> str:
    """``io``, ``stuck`` or ``unknown`` for a thread in ``state`` (its ``stat`` letter), waiting in kernel
    function ``wait_channel`` (empty: not known), in system call ``syscall`` (``None``: in none, or not
    known), on a file descriptor of kind ``fd_kind`` (``pipe``, ``file``, ``socket``, ``other``, empty)."""
    if state in ("T", "t"):
        return STUCK  # stopped by a signal or a debugger: nothing returns until someone resumes it
    if state not in ("S", "D"):
        return UNKNOWN  # running (R), ended (Z), idle (I)...: not a blocked wait
    channel = wait_channel.lower()
    if channel:
        if channel.startswith(_IO_CHANNEL_PREFIXES) or any(part in channel for part in _IO_CHANNEL_PARTS):
            return IO
        if any(part in channel for part in _STUCK_CHANNEL_PARTS):
            return STUCK
    if syscall is not None and syscall in _STUCK_SYSCALLS:
        return STUCK
    if syscall is not None and syscall in _IO_SYSCALLS:
        if fd_kind == "socket":
            return UNKNOWN
        if state == "D" or fd_kind in ("pipe", "file"):
            return IO
    return UNKNOWN


def _read(path: str, limit: int = 512) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(limit)
    except OSError:
        return ""


def _fd_kind(pid: int, fd: int) -> str:
    """What ``fd`` of ``pid`` is: ``pipe``, ``socket``, ``file`` (a path) or ``other``; empty when unreadable."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return ""
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("socket:"):
        return "socket"
    if target.startswith("/"):
        return "file"
    return "other"


def main_thread_wait(pid: int) -> str:
    """What the main thread of ``pid`` waits in now (:func:`classify_wait`); ``unknown`` when it is gone
    or ``/proc`` does not say."""
    task = f"/proc/{pid}/task/{pid}"
    stat = _read(f"{task}/stat", 4096)
    fields = stat[stat.rfind(")") + 2 :].split() if ")" in stat else []
    if not fields:
        return UNKNOWN
    state = fields[0]
    channel = _read(f"{task}/wchan", 128).strip()
    if channel == "0" or not channel.replace("_", "").replace(".", "").isalnum():
        channel = ""
    syscall, fd_kind = None, ""
    words = _read(f"{task}/syscall").split()
    if words and words[0].isdigit():  # "running" or "-1 ...": in no system call
        syscall = int(words[0])
        if syscall in _IO_SYSCALLS and len(words) > 1:
            try:
                fd = int(words[1], 16)
            except ValueError:
                fd = -1
            if 0 <= fd < 1 << 31:
                fd_kind = _fd_kind(pid, fd)
    return classify_wait(state, channel, syscall, fd_kind)
