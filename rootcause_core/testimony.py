"""A pod's testimony: the facts about its failure that ``ContainerError`` has no field for.

Why: what the Flyte console shows is what upstream propeller's Go reader picks from the pods' error
files, and that rule looks only at ``ContainerError.timestamp`` (strictly earliest wins). A victim
pod fails a few milliseconds after the root cause, so with clocks a little apart (a node whose
clock runs a second ahead), or a SIGKILLed root cause whose observed death trails its victims'
recorded errors by tens of milliseconds, the console would name a victim. Victims know they are
victims, so a victim pod stamps its document :data:`VICTIM_STAMP_DELAY_NS` *after* its failure:
under the Go rule every root-cause candidate within that much clock skew then wins. The true time
travels here, so this project's reader still orders and shows every failure at the time it happened.

Form: the last line of the ``ContainerError.message``, ``[rootcause testimony v1] {json}``, compact
and small (propeller keeps a message's head and tail when it cuts one, so the line survives), e.g.
``[rootcause testimony v1] {"failed_at_ns":1790000000123456789,"stamp_delay_ns":60000000000}``.
Fields: ``failed_at_ns`` (the failure's true time, ns since the epoch, or absent) and
``stamp_delay_ns`` (how far the document's timestamp was moved after it; 0 for candidates). A reader
that finds no valid line (older writers, a hand-written document) uses the timestamp as it is.
"""

from __future__ import annotations

import dataclasses
import json

#: Starts the testimony line; the version changes when a field's meaning does.
TESTIMONY_TAG = "[rootcause testimony v1] "

#: How far after its failure a victim pod stamps its error document (see the module docstring).
#: Far more than the clock skew between nodes of a working cluster (NTP keeps them within
#: milliseconds); and bounded, so that when every document is a victim's (nobody could name the
#: cause), the time the console shows is still near the failure.
VICTIM_STAMP_DELAY_NS = 60 * 1_000_000_000

#: Longest testimony line accepted: a reader never parses an unbounded JSON text.
MAX_TESTIMONY_CHARS = 4096

_MAX_ABS_NS = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class PodTestimony:
    """What a pod says about its own failure (more fields join as pods testify about peers)."""

    failed_at_ns: int | None
    stamp_delay_ns: int = 0

    def stamped_ns(self) -> int | None:
        """The time the document's ``ContainerError.timestamp`` carries."""
        return None if self.failed_at_ns is None else self.failed_at_ns + self.stamp_delay_ns

    def line(self) -> str:
        """The message's last line for this testimony."""
        fields: dict[str, int] = {"stamp_delay_ns": self.stamp_delay_ns}
        if self.failed_at_ns is not None:
            fields = {"failed_at_ns": self.failed_at_ns, **fields}
        return TESTIMONY_TAG + json.dumps(fields, separators=(",", ":"))


def for_failure(failed_at_ns: int | None, *, victim: bool) -> PodTestimony:
    """The testimony a pod gives for its root-cause failure (its own, or a victim's)."""
    return PodTestimony(failed_at_ns=failed_at_ns, stamp_delay_ns=VICTIM_STAMP_DELAY_NS if victim else 0)


def with_testimony(message: str, testimony: PodTestimony) -> str:
    """``message`` with the testimony as its last line."""
    return f"{message.rstrip(chr(10))}\n{testimony.line()}"


def read_testimony(message: str) -> PodTestimony | None:
    """The testimony on the message's last line; ``None`` when there is none or it is not valid."""
    _, _, last = message.rstrip("\n").rpartition("\n")
    if not last.startswith(TESTIMONY_TAG) or len(last) > MAX_TESTIMONY_CHARS:
        return None
    try:
        fields = json.loads(last[len(TESTIMONY_TAG):])
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    failed_at, delay = fields.get("failed_at_ns"), fields.get("stamp_delay_ns", 0)
    if failed_at is not None and not _is_ns(failed_at):
        return None
    if not _is_ns(delay) or delay < 0:
        return None
    return PodTestimony(failed_at_ns=failed_at, stamp_delay_ns=delay)


def _is_ns(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _MAX_ABS_NS
