"""How often a pod's agent beats, and how long a healthy job's peer may be silent before it is lost.

One home for both defaults: the engine's peer watch uses them, and the flytekit front-end's config
offers them as task settings (``heartbeat_interval_s``, ``lost_after_s``) without importing torch.
docs/frozen_pods.md has the margin measured.
"""

from __future__ import annotations

#: How often each agent writes its heartbeat to the rendezvous store.
HEARTBEAT_INTERVAL_S = 0.5
#: How long a healthy job's peer may go without a heartbeat before its watcher declares it lost: ten
#: heartbeats, so an agent starved of CPU or paused by a long garbage collection is not taken for a
#: frozen node.
SILENCE_LIMIT_S = 5.0
#: The fewest heartbeats a silence limit may span (fewer, and one late beat is a verdict).
MIN_BEATS_PER_LIMIT = 4


def liveness_problem(heartbeat_interval_s: float, silence_limit_s: float | None) -> str | None:
    """Why this pair of settings cannot work, or ``None`` when it can."""
    if isinstance(heartbeat_interval_s, bool) or not heartbeat_interval_s > 0:
        return f"heartbeat_interval_s must be > 0 seconds, got {heartbeat_interval_s!r}"
    if silence_limit_s is None:
        return None
    if isinstance(silence_limit_s, bool) or silence_limit_s < MIN_BEATS_PER_LIMIT * heartbeat_interval_s:
        return (
            f"lost_after_s must be at least {MIN_BEATS_PER_LIMIT} heartbeats "
            f"({MIN_BEATS_PER_LIMIT * heartbeat_interval_s:g} s with heartbeat_interval_s={heartbeat_interval_s:g}) "
            f"or None (no liveness watch), got {silence_limit_s!r}"
        )
    return None


#: Peers a pod probes directly before it declares others lost (the isolation rule's witnesses): a
#: few, so the check costs the same at a thousand pods, and enough that one dead witness does not
#: silence a healthy pod.
ISOLATION_WITNESSES = 3


def cut_off(*, accused: int, witnesses: int, reached: int) -> bool:
    """The isolation rule, the one place it is written: may a pod that is about to declare
    ``accused`` peers lost do so, having reached ``reached`` of ``witnesses`` other peers directly?

    A pod that is itself cut off from the network sees every other pod fall silent at once, and the
    store too when another pod hosts it: if it named them, a healthy majority would be named lost.
    So a verdict needs the larger side: this pod and the witnesses it reached, against the accused
    and the witnesses it could not reach. A tie (two pods that lost each other) is allowed on both
    sides: only the side that still reaches the object store can write its document, which is
    what a failed NIC or a partitioned node leaves the cut-off side without.
    """
    own_side = 1 + reached
    other_side = accused + (witnesses - reached)
    return own_side < other_side
