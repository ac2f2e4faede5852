"""Agent side: a long-lived thread of the agent never dies in silence.

The guard itself is :mod:`rootcause_engine.thread_guard` (the workers' threads use it too, and a
worker imports nothing of the agent); the agent's modules keep importing it from here.
"""

from __future__ import annotations

from rootcause_engine.thread_guard import (
    LoopGuard,
    describe_error,
    guarded_thread,
    run_guarded,
    start_guarded,
)

__all__ = ["LoopGuard", "describe_error", "guarded_thread", "run_guarded", "start_guarded"]
