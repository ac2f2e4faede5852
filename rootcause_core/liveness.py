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
