"""One append-only log of membership events in the rendezvous store, read by every pod alike.

Why: what the pods tell each other (who is in, failed, done, spoke, lost, left, came back) is a
history. Every reader must see the same history in the same order. One key per fact would cost a
thousand reads per look at a thousand pods, and two readers could see two facts in opposite orders.
One numbered log costs each pod one counter read while nothing happens. A round's ledger
(:mod:`.round_ledger`) and the job's soft world (:mod:`.soft_world`) use it. How entries, gaps and
the lock work: ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Collection
from typing import Any

from rootcause_engine.agent.store_values import (
    LogCursor,
    StoreCall,
    StoreLog,
    as_dict,
    as_int,
    as_str,
    as_time_ns,
    bad_value,
    json_value,
)

#: A reason is cut to this many characters (a diagnosis summary can be long; an entry must stay
#: within what a reader accepts, :data:`ENTRY_BYTES`).
MAX_REASON_CHARS = 2000
#: A pod's name in an event (a Kubernetes pod name has at most 253).
MAX_NAME_CHARS = 256
#: The largest entry a reader accepts: the reason above escaped as JSON, and a small payload.
ENTRY_BYTES = 16 << 10


@dataclasses.dataclass(frozen=True)
class Event:
    """One entry of a log: ``kind`` of what happened to ``rank`` (a group rank in a round's log, a
    node index in the job's), ``name`` the pod's, ``reason`` in words, ``time_ns`` on the writer's
    clock, ``data`` a small JSON payload of the kind's own (a member entry, a stalled collective,
    a lost pod's last beat)."""

    kind: str
    rank: int
    name: str = ""
    reason: str = ""
    time_ns: int = 0
    data: Any = None

    def to_json(self) -> str:
        entry: dict[str, Any] = {"kind": self.kind, "rank": self.rank, "name": self.name[:MAX_NAME_CHARS],
                                 "time_ns": self.time_ns}
        if self.reason:
            entry["reason"] = self.reason[:MAX_REASON_CHARS]
        if self.data is not None:
            entry["data"] = self.data
        return json.dumps(entry, separators=(",", ":"))

    @classmethod
    def parse(cls, value: object, key: str, kinds: Collection[str], max_rank: int) -> Event | None:
        """The event read from ``key``; ``None`` (logged) for anything that is not an event of a log
        of ``kinds`` about a rank in ``[0, max_rank]``."""
        entry = as_dict(json_value(value, key, max_bytes=ENTRY_BYTES))
        if entry is None:
            return None
        kind, name, reason = as_str(entry.get("kind")), as_str(entry.get("name", "")), as_str(entry.get("reason", ""))
        rank = as_int(entry.get("rank"), low=0, high=max_rank)
        time_ns = as_time_ns(entry.get("time_ns", 0))
        if kind not in kinds or rank is None or name is None or reason is None or time_ns is None:
            bad_value(key, f"not an event of this log (kinds {', '.join(sorted(kinds))}, ranks 0 to {max_rank})")
            return None
        return cls(kind, rank, name[:MAX_NAME_CHARS], reason[:MAX_REASON_CHARS], time_ns, entry.get("data"))


class EventLog:
    """A log of :class:`Event` in the store and this process's copy of what it has read of it.

    ``count_key`` and ``entry_key`` place it (:class:`~.store_values.StoreLog`); ``kinds`` are the
    events it holds, ``max_rank`` the highest rank one may be about, ``max_entries`` the most it
    may hold (a count beyond is no count of ours). Every reader of a process shares the copy, so a
    pod reads each entry once whoever asks; :meth:`events` is the whole history read so far, in log
    order, and each consumer keeps its own place in it. Thread-safe; the store calls are the
    caller's (``call``: one bounded operation, raising what the store raises)."""

    def __init__(self, count_key: str, entry_key: Callable[[int], str], *, kinds: Collection[str], max_rank: int,
                 max_entries: int) -> None:
        self.kinds = frozenset(kinds)
        self.max_rank = max_rank
        self.store_log = StoreLog(count_key, entry_key, max_entries=max_entries)
        self._cursor = LogCursor(self.store_log)
        self._read: dict[int, Event | None] = {}  # entry number: the event (None: not one)
        self._events: tuple[Event, ...] = ()
        self._lock = threading.Lock()

    def append(self, call: StoreCall, event: Event) -> int | None:
        """Write ``event`` at the end of the log: its number; ``None`` when the log is full or its
        counter, bad, could not be repaired (logged by the store's helpers): the event is then told
        to no one. A counter that holds no count is repaired first (:meth:`_repaired`)."""
        assert event.kind in self.kinds, event.kind
        number = self.store_log.append(call, event.to_json())
        if number is None and self._repaired(call) is not None:
            number = self.store_log.append(call, event.to_json())
        return number

    def length(self, call: StoreCall) -> int | None:
        """How many entries were numbered; ``None`` when the counter is bad (logged)."""
        return self.store_log.length(call)

    def refresh(self, call: StoreCall) -> tuple[Event, ...]:
        """Read the entries written since the last look, up to the length read now (one counter read
        when nothing changed; the new entries in bounded steps; an entry numbered but not written
        yet is looked for again at the next look, the ones after it are read meanwhile, and it is
        voided after the grace). Returns the whole history read so far."""
        with self._lock:
            length = self.store_log.length(call)
            if length is None:
                length = self._repaired(call)
            if length is not None:
                # each step reads new entries or waits for gaps: as many steps as the log can need
                for _ in range(self.store_log.max_entries // 64 + 2):
                    before = (self._cursor.next, len(self._cursor.missing))
                    self._take(self._cursor.poll(call, length))
                    if not self._cursor.pending(length) or (self._cursor.next, len(self._cursor.missing)) == before:
                        break
            return self._events

    def read_through(self, call: StoreCall, length: int, *, poll_s: float) -> tuple[Event, ...]:
        """The valid events among entries 1 to ``length``, waiting for gaps (at most the grace, then
        they are voided): for a reader that needs exactly that prefix, the same for every reader."""
        with self._lock:
            self._take(self._cursor.read_through(call, length, poll_s=poll_s))
            return tuple(event for number, event in sorted(self._read.items()) if number <= length and event)

    def _repaired(self, call: StoreCall) -> int | None:
        """The count the log's counter holds once repaired, when it held none (forged: every pod's
        joins, failures and ends would be told to no one); ``None`` when it was no such counter."""
        return self.store_log.repair(call, self._cursor.next - 1)

    def events(self) -> tuple[Event, ...]:
        """The history read so far (no store call), in log order. Never waits: a refresh blocked on
        a store that stopped answering must not block the readers of what is already known (the
        tuple is replaced whole, never changed)."""
        return self._events

    def _take(self, entries: list[tuple[int, bytes]]) -> None:
        if not entries:
            return
        for number, value in entries:
            self._read[number] = Event.parse(value, self.store_log.entry_key(number), self.kinds, self.max_rank)
        self._events = tuple(event for _, event in sorted(self._read.items()) if event is not None)

