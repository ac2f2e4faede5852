"""A rendezvous round's membership ledger: who joined, failed, finished, spoke, read and was lost.

Why: the peer watch, the hang rule and the agreement all ask the same question of the round's
store: what has each pod told the others so far? They read it here, from one
:class:`~.event_log.EventLog`. Each pod's copy is shared by all of them. That costs one counter read
per heartbeat while nothing happens. The events and how they are read: ``docs/frozen_pods.md``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rootcause_core.collectives import CollectivePosition
from rootcause_core.testimony import LostPod, Member, member_from_entry
from rootcause_engine.agent.event_log import Event, EventLog
from rootcause_engine.agent.peer_link import LinkEndpoint
from rootcause_engine.agent.store_values import MAX_KEYS_PER_READ, StoreCall, as_dict, as_str, as_time_ns
from rootcause_engine.store_layout import ROUND_EVENTS_KEY, round_event_key

T = TypeVar("T")

JOIN, FAILED, DONE, SAID, READ, LOST = "join", "failed", "done", "said", "read", "lost"
ROUND_KINDS = (JOIN, FAILED, DONE, SAID, READ, LOST)
#: Entries per pod a round may hold: its join, failure, end, word and read, and verdicts on it
#: (two watchers, a changed watcher), with room for entries numbered twice.
_ENTRIES_PER_POD = 8


@dataclasses.dataclass(frozen=True)
class Joined:
    """A pod's ``join``: its member entry and its peer link's endpoint (``None``: it has none)."""

    member: Member
    link: LinkEndpoint | None
    #: the name its isolation gate posts its contact under (``None``: it has none)
    contact: str | None = None


class RoundLedger:
    """One round's ledger, for one pod (see the module docstring). ``call`` is the round's bounded
    store operation (it raises what the store raises, or ``StoreUnresponsive``): the reads and
    appends here raise the same, and their callers decide what a silent store means.

    Writing: :meth:`join`, :meth:`failed`, :meth:`lost`, and :meth:`mark` for the events that carry
    nothing (``done``, ``said``, ``read``). Reading: :meth:`refresh` (the one store call), then
    :meth:`joined`, :meth:`ranks`, :meth:`stalls` and :meth:`verdicts` on the history read."""

    def __init__(self, call: StoreCall, world_size: int, own_rank: int) -> None:
        self.call = call
        self.world_size = world_size
        self.own_rank = own_rank
        self.log = EventLog(ROUND_EVENTS_KEY, round_event_key, kinds=ROUND_KINDS, max_rank=max(world_size - 1, 0),
                            max_entries=_ENTRIES_PER_POD * world_size + MAX_KEYS_PER_READ)
        #: each view of the history, with the history it was made from: every heartbeat asks for
        #: them, and a thousand pods' joins must not be parsed again at every beat
        self._views: dict[str, tuple[tuple[Event, ...], Any]] = {}

    # --- writing: this pod's own events, and its verdicts ----------------------------------------

    def join(self, member: Member, link: LinkEndpoint | None, contact: str | None = None) -> None:
        data = {"member": member.entry(), "link": None if link is None else link.to_text(), "contact": contact}
        self._append(JOIN, member.group_rank, member.worker, data=data)

    def failed(self, stalled: CollectivePosition | None) -> None:
        self._append(FAILED, self.own_rank, data=None if stalled is None else stalled.to_json())

    def mark(self, kind: str) -> None:
        """Append this pod's own ``done``, ``said`` or ``read`` (the events that carry nothing more)."""
        assert kind in (DONE, SAID, READ), kind
        self._append(kind, self.own_rank)

    def lost(self, peer: LostPod) -> int | None:
        """Append a verdict on ``peer``: its entry number (``None``: the log takes no more)."""
        return self._append(LOST, peer.group_rank, peer.worker,
                            data={"last_seen_ns": peer.last_seen_ns, "by": self.own_rank})

    def _append(self, kind: str, rank: int, name: str = "", data: object = None) -> int | None:
        return self.log.append(self.call, Event(kind, rank, name, time_ns=time.time_ns(), data=data))

    # --- reading ------------------------------------------------------------------------------

    def refresh(self) -> tuple[Event, ...]:
        """Read what was appended since the last look (any reader's); the history so far."""
        return self.log.refresh(self.call)

    def joined(self) -> dict[int, Joined]:
        """Each pod's first valid ``join``, by group rank."""
        return self._view("joined", self._joined)

    def _joined(self) -> dict[int, Joined]:
        found: dict[int, Joined] = {}
        for event in self._of(JOIN):
            if event.rank in found:
                continue
            data = as_dict(event.data) or {}
            member = member_from_entry(data.get("member"))
            if member is None or member.group_rank != event.rank:
                continue
            link_text, contact = as_str(data.get("link")), as_str(data.get("contact"))
            if contact is not None and not (contact.isascii() and contact.isalnum() and len(contact) <= 64):
                contact = None  # a name that is no token is never a path under the output prefix
            found[event.rank] = Joined(member, None if link_text is None else LinkEndpoint.from_text(link_text),
                                       contact)
        return found

    def ranks(self, kind: str) -> frozenset[int]:
        """The group ranks that appended a ``kind`` event (``failed``, ``done``, ``said``, ``read``...)."""
        assert kind in ROUND_KINDS, kind
        return self._view(kind, lambda: frozenset(event.rank for event in self._of(kind)))

    def stalls(self) -> dict[int, CollectivePosition]:
        """The collective each failed pod's workers timed out in, where they did (a malformed one
        is left out)."""
        found = {}
        for event in self._of(FAILED):
            stall = None if event.data is None else CollectivePosition.from_json(event.data)
            if stall is not None:
                found.setdefault(event.rank, stall)
        return found

    def verdicts(self, since: int = 0) -> tuple[list[LostPod], int]:
        """The lost-pod verdicts after the first ``since`` events of the history, and the history's
        length now (the caller's next ``since``). A verdict names its pod by group rank only (its
        reader names it from its own members); its last beat, when it is a time."""
        history = self.log.events()
        found = []
        for event in history[since:]:
            if event.kind != LOST:
                continue
            last_seen = as_time_ns((as_dict(event.data) or {}).get("last_seen_ns"))
            found.append(LostPod(event.rank, f"group rank {event.rank}", last_seen))
        return found, len(history)

    def _view(self, name: str, make: Callable[[], T]) -> T:
        """``make()``, made again only when the history changed since it was last made."""
        history = self.log.events()
        made = self._views.get(name)
        if made is None or made[0] is not history:
            made = self._views[name] = (history, make())
        return made[1]

    def _of(self, *kinds: str) -> Iterable[Event]:
        return (event for event in self.log.events() if event.kind in kinds)
