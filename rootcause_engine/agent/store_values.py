"""Every value the agent reads from the rendezvous store is checked here before it is used.

Why: the store is shared by every pod of the job, and by anything else that reaches its port. A
value that is not what its key should hold (a torn or stray write, a bug, a forger) must cost its
reader that value and nothing more. It must never cost a watch, a heartbeat, a diagnosis, an
agreement or a world change. So every reader takes its values through these functions. A bad value
is logged once per key (:func:`bad_value`) and treated as absent. The checks: ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
import time
import types
import typing
from collections.abc import Callable
from typing import Any

from rootcause_core.bounded_json import loads_bounded
from rootcause_engine.upstream.say_once import SayOnce

logger = logging.getLogger(__name__)

#: Member entries, heartbeats, verdicts, stalls, link endpoints, membership changes, proposals.
SMALL_VALUE_BYTES = 4096
#: A pod's word and the agreed report: every failure of a pod, with messages and tracebacks (half
#: of the most torch's ``TCPStore`` takes in one value, 8 MiB).
LARGE_VALUE_BYTES = 4 << 20
#: The most keys one store call may check or read (a thousand pods' first look must not be one
#: thousand-key call, and a counter forged to a huge value must not make one).
MAX_KEYS_PER_READ = 128
#: The largest count a counter may hold where nothing smaller bounds it.
MAX_COUNT = 1 << 20
#: How long an entry numbered but not written is waited for before it is voided: its writer numbers
#: and writes it in two successive store calls, so a longer wait means it died in between (or its
#: store calls are stuck, and then it numbers the entry again when it finds it voided).
GAP_GRACE_S = 2.0
INT64_MAX = 2**63 - 1
#: The latest wall-clock time a value may hold (ns since the epoch, 2262): what an int64 holds, and
#: what ``time.time_ns()`` writes; the earliest is the epoch.
MAX_TIME_NS = INT64_MAX
#: A decimal integer as ``str(int)`` writes it (20 characters hold every int64).
_DECIMAL = re.compile(r"-?[0-9]{1,20}")

#: What a voided log entry holds (no JSON value, no decimal number: no writer of ours writes it).
VOID = b"\x00rootcause:void"
#: The ``compare_set`` expectation that reads a key without changing it (see :func:`read_value`).
_ABSENT = b"\x00rootcause:absent"
#: How many times a writer numbers an entry again after finding it voided.
_APPEND_TRIES = 3
#: How many gaps one look reads again (each is one call): a counter forged past what was written
#: must not cost every reader a hundred calls at every heartbeat.
_GAPS_PER_LOOK = 16

#: A store operation: ``call(operation, *args)``, raising what the store raises (or a timeout).
StoreCall = Callable[..., Any]

#: Keys reported at most this many, so that a forger writing many keys cannot grow the memory.
_MAX_REPORTED = 4096
_reported = SayOnce(most=_MAX_REPORTED)


def bad_value(key: str, why: str) -> None:
    """Log that ``key`` held a value its reader refused: once per key (a heartbeat reads the same
    bad value at every beat), at debug level after the first :data:`_MAX_REPORTED` keys (no lock:
    :class:`~rootcause_engine.upstream.say_once.SayOnce` needs none)."""
    (logger.warning if _reported.first(key) else logger.debug)(
        "rendezvous store: ignoring the value of %s (%s): not what this key holds", key, why
    )


# --- values ---------------------------------------------------------------------------------------

def parse_json(value: object, *, max_bytes: int = SMALL_VALUE_BYTES) -> object | None:
    """The JSON in ``value`` (bytes or text), within ``max_bytes`` and the depth cap; ``None`` for
    anything else (no log: for parsers that do not know the key; see :func:`json_value`)."""
    return _json_or_reason(value, max_bytes)[0]


def json_value(value: object, key: str, *, max_bytes: int = SMALL_VALUE_BYTES) -> object | None:
    """The JSON read from ``key``; ``None`` when absent, or bad (logged)."""
    if value is None:
        return None
    parsed, why = _json_or_reason(value, max_bytes)
    if why is not None:
        bad_value(key, why)
    return parsed


def int_value(value: object, key: str, *, low: int = 0, high: int = INT64_MAX) -> int | None:
    """A decimal integer read from ``key`` (``str(int)`` as written: heartbeats, times, lengths)
    within ``[low, high]`` (:func:`decimal`); ``None`` when absent, or bad (logged)."""
    if value is None:
        return None
    text = text_value(value, key, max_bytes=24)
    if text is None:
        return None
    number, why = _decimal(text, low, high)
    if why is not None:
        bad_value(key, why)
    return number


def time_value(value: object, key: str) -> int | None:
    """A wall-clock time read from ``key`` (ns since the epoch, as ``str(time.time_ns())`` writes
    it: a heartbeat); ``None`` when absent, or bad (logged)."""
    return int_value(value, key, low=0, high=MAX_TIME_NS)


def decimal(text: str, *, low: int, high: int) -> int | None:
    """``text`` as a decimal integer within ``[low, high]``: ASCII digits only, a leading ``-`` only
    where ``low`` allows negatives; ``None`` for anything else (no log: for parsers that do not
    know the key)."""
    return _decimal(text, low, high)[0]


def _decimal(text: str, low: int, high: int) -> tuple[int | None, str | None]:
    """``(number, None)``, or ``(None, why it is none)``."""
    if _DECIMAL.fullmatch(text) is None:
        return None, "not a decimal integer of ASCII digits"
    if text.startswith("-") and low >= 0:
        return None, "negative"
    number = int(text)
    if not low <= number <= high:
        return None, f"{number} is outside [{low}, {high}]"
    return number, None


def text_value(value: object, key: str, *, max_bytes: int = SMALL_VALUE_BYTES) -> str | None:
    """UTF-8 text read from ``key``, at most ``max_bytes``; ``None`` when absent, or bad (logged)."""
    if value is None:
        return None
    if not isinstance(value, (bytes, str)):
        bad_value(key, f"a {type(value).__name__}, not bytes")
        return None
    if len(value) > max_bytes:
        bad_value(key, f"{len(value)} bytes, more than {max_bytes}")
        return None
    try:
        return value.decode() if isinstance(value, bytes) else value
    except UnicodeDecodeError:
        bad_value(key, "not UTF-8")
        return None


def _json_or_reason(value: object, max_bytes: int) -> tuple[object | None, str | None]:
    if not isinstance(value, (bytes, str)):
        return None, f"a {type(value).__name__}, not bytes"
    try:
        return loads_bounded(value, max_bytes=max_bytes), None
    except ValueError as error:
        return None, f"not JSON within the bounds: {str(error)[:200]}"


# --- typed accessors on parsed JSON ---------------------------------------------------------------

def as_int(value: object, *, low: int = -INT64_MAX - 1, high: int = INT64_MAX) -> int | None:
    """``value`` if it is an int (not a bool) within ``[low, high]``, else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high else None


def as_time_ns(value: object) -> int | None:
    """``value`` if it is a wall-clock time (an int of ns since the epoch, at most
    :data:`MAX_TIME_NS`: an event's time, a last beat, when a wait began), else ``None``."""
    return as_int(value, low=0, high=MAX_TIME_NS)


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def as_list(value: object) -> list[Any] | None:
    return value if isinstance(value, list) else None


class _Invalid:
    """What :func:`conform` returns for a value that is not of the type asked for."""


INVALID = _Invalid()


def conform(value: object, hint: Any) -> Any:
    """``value`` as the type ``hint`` names (``int``, ``str``, ``bool``, an ``Enum``, or a union of
    these with ``None``: a dataclass field's resolved annotation); :data:`INVALID` when it is not
    one. An enum is built from its value. Lets a dataclass written as JSON be read back field by
    field, with the types its annotations promise (``diagnosis/agreed.py``)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return None
        if option is bool and isinstance(value, bool):
            return value
        if option is int and as_int(value) is not None:
            return value
        if option is str and isinstance(value, str):
            return value
        if isinstance(option, type) and issubclass(option, enum.Enum):
            try:
                return option(value)
            except (ValueError, TypeError):
                continue
    return INVALID


def dataclass_from_json(cls: type[Any], data: object) -> Any:
    """An instance of the dataclass ``cls`` from the dict ``data`` (JSON of its fields), each field
    checked by :func:`conform` against its annotation; unknown keys ignored, a missing field takes
    its default. ``None`` for a value that is not one."""
    if not isinstance(data, dict):
        return None
    hints = _field_types(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                return None
            continue
        value = conform(data[field.name], hints[field.name])
        if value is INVALID:
            return None
        values[field.name] = value
    return cls(**values)


_hints: dict[type[Any], dict[str, Any]] = {}


def _field_types(cls: type[Any]) -> dict[str, Any]:
    known = _hints.get(cls)
    if known is None:
        known = _hints[cls] = typing.get_type_hints(cls)
    return known


# --- counters and keys that may be absent ---------------------------------------------------------

def read_value(call: StoreCall, key: str) -> bytes | None:
    """The raw value of ``key``, ``None`` when absent, in one call that neither waits nor writes.

    ``get`` waits for an absent key (up to the client's timeout: long enough to make a bounded
    store give up on the client), and ``check`` + ``get`` is two calls. ``compare_set`` with an
    expectation no writer of ours stores returns the current value and changes nothing (torch's
    ``TCPStore``, ``HashStore`` and ``PrefixStore``: an absent key with a non-empty expectation
    returns the expectation and stays absent; a present one that differs returns its value)."""
    value = call("compare_set", key, _ABSENT, _ABSENT)
    return None if value == _ABSENT else bytes(value)


def read_counter(call: StoreCall, key: str, *, high: int = MAX_COUNT) -> int | None:
    """The count under ``key`` (0 when absent); ``None`` when it is no count within ``[0, high]``
    (logged). Read with :func:`read_value`, never ``add(key, 0)``: see the module docstring."""
    value = read_value(call, key)
    return 0 if value is None else int_value(value, key, high=high)


def bump_counter(call: StoreCall, key: str, *, high: int = MAX_COUNT) -> int | None:
    """Add one to the counter under ``key`` and return the new count; ``None``, with nothing
    written, when the counter holds no count within ``[0, high)`` (an ``add`` would cost this
    client its connection, or number past what a reader will read)."""
    if (count := read_counter(call, key, high=high)) is None:
        return None
    if count >= high:
        bad_value(key, f"{count} is the most this counter may count")
        return None
    return int(call("add", key, 1))


# --- logs: numbered entries under a counter -------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StoreLog:
    """An append-only log in the store: ``count_key`` numbers the entries (from 1), each written
    once under ``entry_key(number)``; at most ``max_entries`` entries (a count beyond is bad)."""

    count_key: str
    entry_key: Callable[[int], str]
    max_entries: int
    grace_s: float = GAP_GRACE_S

    def append(self, call: StoreCall, value: str) -> int | None:
        """Number ``value`` and write it (first writer wins, so a reader that voided the number
        meanwhile is not overwritten: the entry is numbered again). Its number; ``None`` when the
        counter is bad or full (logged) or every number tried was voided."""
        encoded = value.encode()
        for _ in range(_APPEND_TRIES):
            number = bump_counter(call, self.count_key, high=self.max_entries)
            if number is None:
                return None
            if bytes(call("compare_set", self.entry_key(number), "", value)) == encoded:
                return number
            logger.warning("rendezvous store: entry %s was voided (or written, past a repaired counter) before "
                           "it was written: numbering it again", self.entry_key(number))
        return None

    def length(self, call: StoreCall) -> int | None:
        """How many entries were numbered; ``None`` when the counter is bad (logged)."""
        return read_counter(call, self.count_key, high=self.max_entries)

    def repair(self, call: StoreCall, floor: int) -> int | None:
        """Give a counter that holds no count (forged, torn) the count of the entries written, so
        that a bad counter costs the log nothing but itself; ``floor``: how many entries the caller
        knows were numbered. The count now held when the counter was bad and holds one now (this
        reader's repair or another's); ``None`` when it was a count already (full, say) or still
        is none.

        The count is ``floor`` and the entries written without a gap after it (found with bounded
        ``check`` calls). One ``compare_set`` from the bad value: readers that repair at once agree
        on the first one's count. An entry written past a gap is met again by the writer that
        numbers it (its ``compare_set`` loses: :meth:`append` numbers its entry again)."""
        bad = read_value(call, self.count_key)
        if bad is None or int_value(bad, self.count_key, high=self.max_entries) is not None:
            return None
        count = self._written_after(call, max(0, min(floor, self.max_entries)))
        now = bytes(call("compare_set", self.count_key, bad, str(count).encode()))
        repaired = int_value(now, self.count_key, high=self.max_entries)
        if repaired is not None:
            logger.warning("rendezvous store: the counter %s held no count: set to %d, the entries written",
                           self.count_key, repaired)
        return repaired

    def _written_after(self, call: StoreCall, floor: int) -> int:
        """``floor`` plus the entries present after it, up to the first absent one: whole steps of
        :data:`MAX_KEYS_PER_READ` keys while every key is there, then a bisection of the last."""
        count = floor
        while count < self.max_entries:
            keys = [self.entry_key(number)
                    for number in range(count + 1, min(count + MAX_KEYS_PER_READ, self.max_entries) + 1)]
            if call("check", keys):
                count += len(keys)
                continue
            present, absent = 0, len(keys)  # the first ``present`` keys are there, the first ``absent`` are not all
            while absent - present > 1:
                middle = (present + absent) // 2
                present, absent = (middle, absent) if call("check", keys[:middle]) else (present, middle)
            return count + present
        return count


class LogCursor:
    """One reader's place in a :class:`StoreLog`: the entries it has not read yet (one step of at
    most :data:`MAX_KEYS_PER_READ` keys per :meth:`poll`, the oldest :data:`_GAPS_PER_LOOK` gaps
    first), and the gaps it is waiting for."""

    def __init__(self, log: StoreLog) -> None:
        self.log = log
        self.next = 1  # the first number never looked at
        self.missing: dict[int, float] = {}  # numbers looked at and not written yet: since when

    def pending(self, length: int) -> bool:
        """Whether entries up to ``length`` remain to be read (gaps included)."""
        return bool(self.missing) or self.next <= length

    def poll(self, call: StoreCall, length: int) -> list[tuple[int, bytes]]:
        """Look once at the entries not read yet, up to number ``length``: the ones written since
        (number, raw value), in order. Voided entries are passed over; a gap older than the grace
        is voided now."""
        numbers = sorted(self.missing)[:_GAPS_PER_LOOK]
        numbers += range(self.next, min(length, self.next + MAX_KEYS_PER_READ - len(numbers) - 1) + 1)
        if not numbers:
            return []
        self.next = max(self.next, numbers[-1] + 1)
        keys = [self.log.entry_key(number) for number in numbers]
        values: list[bytes | None] | None = None
        if call("check", keys):
            got = call("multi_get", keys)
            if isinstance(got, list) and len(got) == len(keys):
                values = [bytes(value) for value in got]
        if values is None:  # some are not written yet (a rare gap): each on its own, without waiting
            values = [read_value(call, key) for key in keys]
        now = time.monotonic()
        found: list[tuple[int, bytes]] = []
        for number, key, value in zip(numbers, keys, values, strict=True):
            if value is None:
                since = self.missing.setdefault(number, now)
                if now - since < self.log.grace_s:
                    continue
                value = bytes(call("compare_set", key, "", VOID))
                if value == VOID:
                    logger.warning("rendezvous store: %s was numbered but not written within %g s: voided, "
                                   "later entries are read without it", key, self.log.grace_s)
            self.missing.pop(number, None)
            if value != VOID:
                found.append((number, value))
        return found

    def read_through(self, call: StoreCall, length: int, *, poll_s: float) -> list[tuple[int, bytes]]:
        """Every entry up to ``length`` not read yet, waiting for gaps (at most the grace, then
        they are voided): for a reader that needs the whole log, the same for every reader."""
        found: list[tuple[int, bytes]] = []
        while self.pending(length):
            before = (self.next, len(self.missing))
            found.extend(self.poll(call, length))
            if (self.next, len(self.missing)) == before and self.missing:
                time.sleep(poll_s)  # only gaps left: wait for their writers (or the grace)
        return sorted(found)
