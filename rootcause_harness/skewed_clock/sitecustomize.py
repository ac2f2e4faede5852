"""A simulated pod's wall clock, running ahead (or behind) the machine's by a fixed offset, and stepped.

The simulator puts this folder first on ``PYTHONPATH`` of the one pod whose clock it skews, with
``ROOTCAUSE_SIM_CLOCK_OFFSET_NS`` set; Python's ``site`` imports ``sitecustomize`` at start-up, so
every process of that pod (its agent and the workers torch starts, which inherit the environment)
reads ``time.time()`` / ``time.time_ns()`` shifted, as on a node whose clock is off. That is the clock
every timestamp of this project comes from. Not a package on purpose: only ``site`` loads it.

Steps (NTP stepping the clock, a VM resumed and resynced): ``ROOTCAUSE_SIM_CLOCK_STEPS`` is a comma
list of ``AT:STEP``, each adding ``STEP`` ns (signed) to the offset from the moment
``time.monotonic_ns()`` reaches ``AT``. The moments are on the machine's monotonic clock, which every
process of the pod shares, so they all step together; the monotonic clock itself never steps.
"""

import os
import time

_OFFSET_NS = int(os.environ.get("ROOTCAUSE_SIM_CLOCK_OFFSET_NS") or 0)
_STEPS = sorted(
    (int(at), int(step))
    for at, _, step in (item.partition(":") for item in (os.environ.get("ROOTCAUSE_SIM_CLOCK_STEPS") or "").split(","))
    if step
)

if _OFFSET_NS or _STEPS:
    _machine_time_ns = time.time_ns
    _monotonic_ns = time.monotonic_ns

    def _skewed_time_ns() -> int:
        now = _monotonic_ns() if _STEPS else 0
        return _machine_time_ns() + _OFFSET_NS + sum(step for at, step in _STEPS if now >= at)

    def _skewed_time() -> float:
        return _skewed_time_ns() / 1e9

    time.time_ns = _skewed_time_ns
    time.time = _skewed_time
