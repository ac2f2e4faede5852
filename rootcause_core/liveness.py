"""How often a pod's agent beats, and how long a healthy job's peer may be silent before it is lost.

One home for both defaults: the engine's peer watch uses them, and the flytekit front-end's config
offers them as task settings (``heartbeat_interval_s``, ``lost_after_s``) without importing torch.
docs/frozen_pods.md has the margin measured.
"""

from __future__ import annotations

import dataclasses
import enum

#: How often each agent writes its heartbeat to the rendezvous store.
HEARTBEAT_INTERVAL_S = 0.5
#: How long a healthy job's peer may go without a heartbeat before its watcher declares it lost: ten
#: heartbeats, so an agent starved of CPU or paused by a long garbage collection is not taken for a
#: frozen node.
SILENCE_LIMIT_S = 5.0
#: The fewest heartbeats a silence limit may span (fewer, and one late beat is a verdict).
MIN_BEATS_PER_LIMIT = 4


def liveness_problem(heartbeat_interval_s: float, lost_after_s: float | None) -> str | None:
    """Why this pair of settings cannot work, or ``None`` when it can."""
    if isinstance(heartbeat_interval_s, bool) or not heartbeat_interval_s > 0:
        return f"heartbeat_interval_s must be > 0 seconds, got {heartbeat_interval_s!r}"
    if lost_after_s is None:
        return None
    if isinstance(lost_after_s, bool) or lost_after_s < MIN_BEATS_PER_LIMIT * heartbeat_interval_s:
        return (
            f"lost_after_s must be at least {MIN_BEATS_PER_LIMIT} heartbeats "
            f"({MIN_BEATS_PER_LIMIT * heartbeat_interval_s:g} s with heartbeat_interval_s={heartbeat_interval_s:g}) "
            f"or None (no liveness watch), got {lost_after_s!r}"
        )
    return None


#: Peers a pod probes directly before it declares others lost (the isolation rule's witnesses): a
#: few, so the check costs the same at a thousand pods, and enough that one dead witness does not
#: silence a healthy pod.
ISOLATION_WITNESSES = 3


class Side(enum.Enum):
    """Which side of a split this pod is on, by the peers it reached (:func:`isolation_side`)."""

    LARGER = "larger"  # it may name the pods it lost
    SMALLER = "smaller"  # it is the one cut off: it names no one
    EVEN = "even"  # as many on each side (two pods that lost each other): a third party decides


def isolation_side(*, accused: int, witnesses: int, reached: int) -> Side:
    """The isolation rule, the one place it is written: a pod about to declare ``accused`` peers
    lost, having reached ``reached`` of ``witnesses`` other peers directly.

    A pod that is itself cut off from the network sees every other pod fall silent at once, and the
    store too when another pod hosts it: if it named them, a healthy majority would be named lost.
    So a verdict needs the larger side: this pod and the witnesses it reached, against the accused
    and the witnesses it could not reach. An even split (two pods that lost each other) cannot be
    told from the peers alone: :func:`settle_even_split` decides it with a third party.
    """
    own_side = 1 + reached
    other_side = accused + (witnesses - reached)
    if own_side == other_side:
        return Side.EVEN
    return Side.LARGER if own_side > other_side else Side.SMALLER


@dataclasses.dataclass(frozen=True)
class Reach:
    """What a pod reached beyond its peers when it lost them: the cluster's API endpoint and the
    object store its documents go to (``None``: not tried, e.g. no API endpoint in a local run)."""

    api: bool | None
    object_store: bool | None

    def count(self) -> int:
        return int(bool(self.api)) + int(bool(self.object_store))

    def tried(self) -> int:
        return int(self.api is not None) + int(self.object_store is not None)

    def covers(self, other: Reach) -> bool:
        """Whether this pod reached everything ``other`` reached."""
        return all(mine or not theirs for mine, theirs in ((self.api, other.api),
                                                            (self.object_store, other.object_store)))


class Settled(enum.Enum):
    """How an even split ends for one accused peer (:func:`settle_even_split`)."""

    ACCUSE = "accuse"  # the peer is lost: it said nothing where this pod could read it
    CUT_OFF = "cut-off"  # this pod is the one cut off: it names no one
    LINK = "link"  # both live and reach as much: the link between them was lost, both are named


def settle_even_split(own: Reach, peer: Reach | None) -> Settled:
    """An even split, decided by a third party (docs/frozen_pods.md, "two pods").

    ``own``: what this pod reached; ``peer``: what the accused peer said it reached, in the object
    store, within the wait (``None``: it said nothing). A pod that reached none of the third
    parties it tried is the one cut off, and so is one that could not write to the object store
    (it cannot hear its peer's word there, nor write its own document). A peer that said nothing
    is lost (a lost node or a dead NIC cannot write). Otherwise the one that reached less is cut
    off; where both reached as much, the evidence is symmetric, and what was lost is the link
    between them.
    """
    if (own.tried() and not own.count()) or own.object_store is False:
        return Settled.CUT_OFF
    if peer is None:
        return Settled.ACCUSE
    if own.covers(peer) and peer.covers(own):
        return Settled.LINK
    return Settled.CUT_OFF if peer.covers(own) else Settled.ACCUSE
