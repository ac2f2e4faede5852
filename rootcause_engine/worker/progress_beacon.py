"""Worker side: say every few seconds where this rank stands in its collectives, for the agent's hang
watch. A rank that hangs raises nothing, and its peers wait until their collective times out: 10 to
60 minutes. The agent can name it much sooner if it knows, while the job is healthy, which
collective each rank last entered and whether it completed. So the worker's watch thread writes
torch's own per-group status and the open send/recv calls (:mod:`.point_to_point`) to
``progress.json`` every ``interval_s``. A beat costs a status read and one small file write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from rootcause_core.collectives import CollectivePosition, is_mono_ns, positions_from_json
from rootcause_engine.thread_guard import Duty, GuardedLoop, LoopGuard, worker_watch
from rootcause_engine.upstream.torch_worker import flight_recorder_entries, flight_recorder_status
from rootcause_engine.worker.complete_files import write_complete
from rootcause_engine.worker.point_to_point import open_point_to_point_calls, record_point_to_point

BEACON_FILE_NAME = "progress.json"
#: Set in the agent's environment (seconds between beats) when the hang watch is on; workers inherit it.
BEACON_INTERVAL_VARIABLE = "ROOTCAUSE_PROGRESS_BEACON_S"
#: Seconds between two beats: the agent's hang watch looks as often (``agent.hang_watch``).
BEACON_INTERVAL_S = 2.0
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class GroupProgress:
    """One process group of a rank: the last collective it entered, the last that completed, and
    for an open one (:attr:`pending`) when it was entered and its name, once the beacon looked."""

    pg: str
    entered: int
    completed: int
    since_ns: int | None = None
    op: str = ""
    #: when it was entered on the host's monotonic clock (the module docstring's "Clocks")
    since_mono_ns: int | None = None

    @property
    def pending(self) -> bool:
        """The rank entered a collective of this group that has not completed: it waits in it."""
        return self.entered > self.completed

    def position(self) -> CollectivePosition:
        """The last collective entered, as the diagnosis describes it (``all_reduce #4 of process group 0``)."""
        return CollectivePosition(pg=self.pg, seq=max(self.entered, 0), op=self.op, entered_ns=self.since_ns,
                                  entered_mono_ns=self.since_mono_ns)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: object) -> GroupProgress | None:
        """Parse one entry written by :meth:`to_json`; ``None`` for anything malformed."""
        if not isinstance(value, Mapping):
            return None
        pg, entered, completed = value.get("pg"), value.get("entered"), value.get("completed")
        since, op, mono = value.get("since_ns"), value.get("op", ""), value.get("since_mono_ns")
        if not isinstance(pg, str) or not isinstance(op, str) or not all(_is_int(n) for n in (entered, completed)):
            return None
        if (since is not None and not _is_int(since)) or (mono is not None and not is_mono_ns(mono)):
            return None
        return cls(pg[:64], entered, completed, since, op[:64], mono)


@dataclasses.dataclass(frozen=True)
class BeaconReading:
    """What one beat of a worker's beacon said (the file's content)."""

    pid: int
    written_ns: int
    #: every byte the beacon wrote before this file (the agent discounts them from the I/O it sees;
    #: the file itself, under a kilobyte, is within the agent's I/O floor)
    written_bytes: int
    groups: tuple[GroupProgress, ...]
    #: the blocking send/recv calls open at the beat, each naming its peer in ``awaited``
    point_to_point: tuple[CollectivePosition, ...] = ()

    def group(self, pg: str) -> GroupProgress | None:
        return next((group for group in self.groups if group.pg == pg), None)

    def position(self) -> tuple[object, ...]:
        """Where the rank stands, comparable between beats: a different one means it entered or
        completed a collective, or started or ended a send/recv, meanwhile (progress)."""
        return (
            tuple((group.pg, group.entered, group.completed) for group in self.groups),
            tuple((call.op, call.seq) for call in self.point_to_point),
        )

    @property
    def waiting(self) -> bool:
        """The rank waits in a collective it entered, or in a blocking send or recv."""
        return bool(self.point_to_point) or any(group.pending for group in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "pid": self.pid,
            "written_ns": self.written_ns,
            "written_bytes": self.written_bytes,
            "groups": [group.to_json() for group in self.groups],
            "p2p": [position.to_json() for position in self.point_to_point],
        }

    @classmethod
    def from_json(cls, value: object) -> BeaconReading | None:
        """Parse a file's content; ``None`` for anything malformed (groups that are, are dropped)."""
        if not isinstance(value, Mapping) or value.get("format") != FORMAT:
            return None
        pid, written, count = value.get("pid"), value.get("written_ns"), value.get("written_bytes")
        groups = value.get("groups")
        if not all(_is_int(n) for n in (pid, written, count)) or not isinstance(groups, list):
            return None
        parsed = tuple(group for item in groups if (group := GroupProgress.from_json(item)) is not None)
        return cls(pid, written, count, parsed, tuple(positions_from_json(value.get("p2p"))))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entered_mono(age_ns: int, seen_mono_ns: int, not_before_ns: int) -> int:
    """When a wait first seen at ``seen_mono_ns`` (monotonic) began: ``age_ns`` earlier by the wall
    clock, kept between the previous beat (``not_before_ns``, which did not see it) and the sighting."""
    return seen_mono_ns - min(max(age_ns, 0), max(seen_mono_ns - not_before_ns, 0))


def beacon_path(error_file: str) -> str:
    """The beacon file of the worker whose torch error file is ``error_file``."""
    return os.path.join(os.path.dirname(error_file), BEACON_FILE_NAME)


def read_beacon(path: str) -> BeaconReading | None:
    """The last beat written at ``path``; ``None`` when there is none (yet) or it cannot be parsed."""
    try:
        with open(path, encoding="utf-8") as handle:
            return BeaconReading.from_json(json.loads(handle.read(1 << 20)))
    except (OSError, ValueError, RecursionError):
        return None


class ProgressBeacon:
    """The beats of one worker (see the module docstring); :meth:`beat` is one, the thread calls it."""

    def __init__(
        self,
        path: str,
        *,
        status: Callable[[], dict[str, tuple[int, int]] | None] = flight_recorder_status,
        entries: Callable[[], list[dict[str, object]] | None] = flight_recorder_entries,
        open_calls: Callable[[], list[CollectivePosition]] = open_point_to_point_calls,
        wall_ns: Callable[[], int] | None = None,
        mono_ns: Callable[[], int] | None = None,
    ) -> None:
        self.path = path
        self._status = status
        self._entries = entries
        self._open_calls = open_calls
        self._wall_ns = wall_ns or time.time_ns
        self._mono_ns = mono_ns or time.monotonic_ns
        self.written_bytes = 0
        self._pending: dict[str, GroupProgress] = {}  # the open collective of each group, as last described
        self._looked_up: set[tuple[str, int]] = set()
        #: the monotonic time of the previous beat's look (``None`` before the first), and per open
        #: collective (by group) the one before the beat that first saw it: it was entered after that
        self._last_mono_ns: int | None = None
        self._not_before: dict[str, int] = {}
        #: the monotonic moment each open send/recv was entered (by the call as its recorder says it)
        self._calls_mono: dict[tuple[object, ...], int] = {}
        #: a beat that raised costs that beat only, logged once per kind (in the worker's log)
        self.beats = LoopGuard("progress beacon", stopped="its file was removed, so that the hang watch does "
                                                          "not read a rank that stopped where it last said")
        self._loop: GuardedLoop | None = None
        self._duty: Duty | None = None

    def reading(self) -> BeaconReading:
        """This beat's reading (the groups' state, described where a wait lasts)."""
        now, mono = self._wall_ns(), self._mono_ns()
        previous = mono if self._last_mono_ns is None else self._last_mono_ns
        self._last_mono_ns = mono
        groups = []
        for pg, (entered, completed) in sorted((self._status() or {}).items()):
            if entered <= completed:
                self._pending.pop(pg, None)
                self._not_before.pop(pg, None)
                groups.append(GroupProgress(pg, entered, completed))
                continue
            known = self._pending.get(pg)
            if known is None or known.entered != entered:
                # first seen open: entered by now, and after the previous beat
                known = GroupProgress(pg, entered, completed, since_ns=now, since_mono_ns=mono)
                self._not_before[pg] = previous
            elif (pg, entered) not in self._looked_up:
                known = self._described(known)  # still open a beat later: a wait worth its name
            self._pending[pg] = known = dataclasses.replace(known, completed=completed)
            groups.append(known)
        return BeaconReading(os.getpid(), now, self.written_bytes, tuple(groups), self._calls(now, mono, previous))

    def _described(self, group: GroupProgress) -> GroupProgress:
        """``group``'s open collective with its name and the time it was entered, from the ring (once)."""
        self._looked_up.add((group.pg, group.entered))
        for entry in reversed(self._entries() or []):
            if str(entry.get("pg_id")) == group.pg and entry.get("collective_seq_id") == group.entered:
                created, name = entry.get("time_created_ns"), entry.get("profiling_name")
                if not _is_int(created):
                    return dataclasses.replace(group, op=str(name or "")[:64])
                seen, seen_mono = group.since_ns, group.since_mono_ns
                mono = seen_mono if seen is None or seen_mono is None else _entered_mono(
                    seen - created, seen_mono, self._not_before.get(group.pg, seen_mono))
                return dataclasses.replace(group, since_ns=created, op=str(name or "")[:64], since_mono_ns=mono)
        return group

    def _calls(self, now: int, mono: int, previous: int) -> tuple[CollectivePosition, ...]:
        """The open send/recv calls, each with the monotonic moment it was entered: for one first
        seen now, its wall-clock age moved within this beat's window (it was not open at the previous)."""
        calls, known = [], self._calls_mono
        self._calls_mono = {}
        for call in self._open_calls():
            key = (call.pg, call.seq, call.op, call.awaited, call.entered_ns)
            since = known.get(key)
            if since is None:
                since = mono if call.entered_ns is None else _entered_mono(now - call.entered_ns, mono, previous)
            self._calls_mono[key] = since
            calls.append(dataclasses.replace(call, entered_mono_ns=since))
        return tuple(calls)

    def beat(self) -> None:
        """Write this beat's reading."""
        text = json.dumps(self.reading().to_json())
        self.written_bytes += len(text.encode())
        write_complete(self.path, text)

    def start(self, interval_s: float, loop: GuardedLoop | None = None) -> None:
        """Beat now and every ``interval_s`` on this worker's watch thread (``loop``: another, for a
        test); a beat that raises costs that beat only (never the worker's problem, never silent:
        :attr:`beats`). Should the thread die, the beats end and the file goes (:meth:`_remove_file`)."""
        self._loop = loop or worker_watch()
        self._duty = self._loop.every(interval_s, self.beat, guard=self.beats, first_wait=False,
                                      on_death=self._remove_file, outlives_death=False)
        self._loop.ensure_running()

    def stop(self) -> None:
        """No more beats (the file stays: the worker's last word)."""
        if self._loop is not None and self._duty is not None:
            self._loop.drop(self._duty)
            self._duty = None

    def _remove_file(self, error: BaseException) -> None:
        """The thread died (:attr:`beats` keeps it): remove the file. Its last beat would go on saying where
        the rank stood (a wait that looks ever longer), and the hang watch could name a rank that is only
        unwatched; without a file, the rank is one the watch names no one for."""
        with contextlib.suppress(OSError):
            os.remove(self.path)


#: The beacon of this process, once :func:`start_progress_beacon` ran.
_started: list[ProgressBeacon] = []


def beacon_interval() -> float | None:
    """The beat interval the agent asked for (:data:`BEACON_INTERVAL_VARIABLE`); ``None``: no beacon."""
    try:
        interval = float(os.environ.get(BEACON_INTERVAL_VARIABLE, ""))
    except ValueError:
        return None
    return interval if interval > 0 else None


def start_progress_beacon(error_file: str | None, interval_s: float) -> bool:
    """Start this worker's beacon on its watch thread (idempotent); False where there is no error file
    to write beside."""
    if _started:
        return True
    if not error_file:
        return False
    record_point_to_point()  # the open send/recv calls are part of each beat
    beacon = ProgressBeacon(beacon_path(error_file))
    beacon.start(interval_s)
    _started.append(beacon)
    return True
