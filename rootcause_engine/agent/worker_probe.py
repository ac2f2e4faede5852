"""Agent side: ask the live workers where they are, just before tearing them down.

Why: after a collective timeout, the rank that hung is alive and silent. Once SIGTERM ends it, it
looks like every other victim. So each worker that installed the probe
(:mod:`rootcause_engine.worker.hang_probe`) answers :data:`PROBE_SIGNAL` with its stacks and last
collectives. A worker that answers nothing is not dropped: its answer says what the agent saw
instead. The wait is bounded by ``wait_s``. How, with the cost: ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable

from rootcause_core.collectives import CollectivePosition, positions_from_json
from rootcause_core.safe_text import MAX_WORKER_TEXT_BYTES, bounded_text
from rootcause_engine.agent.worker_progress import process_tree_usage
from rootcause_engine.worker.hang_probe import PROBE_SIGNAL, probe_paths
from rootcause_engine.worker.progress_beacon import BeaconReading, beacon_path, read_beacon

#: Upper bound on the wait for the answers (added to a teardown only when some worker is slow to answer).
PROBE_WAIT_S = 1.0
#: A stacks file that has not grown for this long is complete (its worker cannot answer from Python).
STACKS_SETTLED_S = 0.2
#: The same for stacks that already show a ``torch.distributed`` call: such a worker waits in a
#: collective (no Python answer will come), and its verdict needs no more of its stacks.
IN_COLLECTIVE_SETTLED_S = 0.02
_POLL_S = 0.01
#: ``/proc/<pid>/stat`` states of a stopped process: it runs nothing, answers no signal's handler.
STOPPED_STATES = ("T", "t")
#: Frames that mean "inside a torch.distributed call" in a faulthandler dump.
COLLECTIVE_FRAME_MARKERS: tuple[str, ...] = (
    "torch/distributed/distributed_c10d.py",
    "torch/distributed/c10d_logger.py",
)


@dataclasses.dataclass(frozen=True)
class ProbeAnswer:
    """What one live worker said when probed: its stacks, and its collectives if it could answer."""

    pid: int
    asked_ns: int
    stacks: str
    collectives: tuple[CollectivePosition, ...] | None  # None: no answer from its Python handler
    #: What the agent saw of a worker that answered nothing (:attr:`silent`): its ``/proc`` state
    #: letter, that state in words, and its progress beacon's last beat (``None``: no beacon file).
    state: str = ""
    state_words: str = ""
    beacon: BeaconReading | None = None

    @property
    def in_collective(self) -> bool:
        """Some thread of the worker was inside a torch.distributed call when probed."""
        return shows_a_collective(self.stacks)

    @property
    def silent(self) -> bool:
        """It answered nothing: no stacks, no collectives (stopped, or its process runs no handler)."""
        return not self.stacks and self.collectives is None

    @property
    def stopped(self) -> bool:
        """Stopped when probed (``T``: SIGSTOP, a frozen container; ``t``: a debugger)."""
        return self.state in STOPPED_STATES


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(4 * MAX_WORKER_TEXT_BYTES)
    except OSError:
        return ""


def _read_collectives(path: str, pid: int, asked_ns: int) -> tuple[CollectivePosition, ...] | None:
    """The worker's answer, if it wrote one for this probe (its pid, written after the ask)."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("pid") != pid:
        return None
    written = document.get("written_ns")
    if not isinstance(written, int) or written < asked_ns:
        return None
    return tuple(positions_from_json(document.get("collectives")))


def probe_workers(workers: Iterable[tuple[int, str]], *, wait_s: float = PROBE_WAIT_S) -> dict[int, ProbeAnswer]:
    """Probe every worker (pid, torch error file) that installed the probe; the answers by pid.

    A worker's answer is complete when its collectives arrive (its C handler wrote the stacks
    before its Python handler ran), or when its stacks have stopped growing for
    :data:`STACKS_SETTLED_S` (a worker whose main thread cannot run Python now), or for
    :data:`IN_COLLECTIVE_SETTLED_S` once they show a ``torch.distributed`` call.
    """
    asked_ns = time.time_ns()
    pending: dict[int, tuple[str, str]] = {}
    beacons: dict[int, str] = {}
    for pid, error_file in workers:
        if not error_file:
            continue
        ready, stacks, collectives = probe_paths(os.path.dirname(error_file))
        if not os.path.exists(ready):
            continue  # not installed (yet): the signal's default action would kill it
        try:
            os.kill(pid, PROBE_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
        pending[pid] = (stacks, collectives)
        beacons[pid] = beacon_path(error_file)
    answers: dict[int, ProbeAnswer] = {}
    growth: dict[int, tuple[int, float]] = {}  # pid -> (stacks size, when it last changed)
    deadline = time.monotonic() + wait_s
    while pending:
        now = time.monotonic()
        for pid, (stacks, collectives) in list(pending.items()):
            positions = _read_collectives(collectives, pid, asked_ns)
            size = _size(stacks)
            last_size, changed = growth.get(pid, (-1, now))
            growth[pid] = (size, changed if size == last_size else now)
            quiet_s = now - growth[pid][1]
            in_collective = quiet_s >= IN_COLLECTIVE_SETTLED_S and shows_a_collective(_read_text(stacks))
            settled = size > 0 and (quiet_s >= STACKS_SETTLED_S or in_collective)
            if positions is not None or settled or now >= deadline:
                del pending[pid]
                text = bounded_text(_read_text(stacks), MAX_WORKER_TEXT_BYTES)
                answer = (
                    ProbeAnswer(pid, asked_ns, text, positions)
                    if text or positions is not None
                    else _silent_answer(pid, asked_ns, beacons[pid])
                )
                if answer is not None:
                    answers[pid] = answer
        if pending:
            time.sleep(_POLL_S)
    return answers


def _silent_answer(pid: int, asked_ns: int, beacon_file: str) -> ProbeAnswer | None:
    """What the agent sees of a worker that answered nothing: its state now, its beacon's last beat;
    ``None`` when it is gone (it ended meanwhile: its exit tells the rest)."""
    usage = process_tree_usage(pid)
    if usage is None or usage.state in ("Z", "X"):
        return None
    beacon = read_beacon(beacon_file)
    return ProbeAnswer(
        pid, asked_ns, "", None, state=usage.state, state_words=usage.describe_state(),
        beacon=beacon if beacon is not None and beacon.pid == pid else None,
    )


def shows_a_collective(stacks: str) -> bool:
    """Some thread of a faulthandler dump is inside a torch.distributed call."""
    return any(marker in stacks for marker in COLLECTIVE_FRAME_MARKERS)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
