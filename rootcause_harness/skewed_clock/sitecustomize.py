"""A simulated pod's wall clock, running ahead (or behind) the machine's by a fixed offset.

The simulator puts this folder first on ``PYTHONPATH`` of the one pod whose clock it skews, with
``ROOTCAUSE_SIM_CLOCK_OFFSET_NS`` set; Python's ``site`` imports ``sitecustomize`` at start-up, so
every process of that pod (its agent and the workers torch starts, which inherit the environment)
reads ``time.time()`` / ``time.time_ns()`` shifted, as on a node whose clock is off. That is the clock
every timestamp of this project comes from. Not a package on purpose: only ``site`` loads it.
"""

import os
import time

_OFFSET_NS = int(os.environ.get("ROOTCAUSE_SIM_CLOCK_OFFSET_NS") or 0)

if _OFFSET_NS:
    _machine_time_ns = time.time_ns
    _machine_time = time.time

    def _skewed_time_ns() -> int:
        return _machine_time_ns() + _OFFSET_NS

    def _skewed_time() -> float:
        return _machine_time() + _OFFSET_NS / 1e9

    time.time_ns = _skewed_time_ns
    time.time = _skewed_time
