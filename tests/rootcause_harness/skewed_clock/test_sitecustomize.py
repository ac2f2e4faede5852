"""``rootcause_harness/skewed_clock/sitecustomize.py``: a real interpreter started with it on ``PYTHONPATH``
reads its wall clock shifted by the offset and steps it set, and unshifted without them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rootcause_harness.faults import CLOCK_OFFSET_VARIABLE, SKEWED_CLOCK_DIR

HOUR_NS = 3600 * 10**9
#: prints time.time_ns(), time.time() and which module each clock function now comes from
PROBE = "import time; print(time.time_ns(), time.time(), time.time_ns.__module__, time.time.__module__)"


def _probe(**variables: str) -> tuple[int, int, float, str, str]:
    """(machine's ns just before, child's time_ns, child's time, modules of its two clock functions)."""
    env = {key: value for key, value in os.environ.items()
           if key not in (CLOCK_OFFSET_VARIABLE, "ROOTCAUSE_SIM_CLOCK_STEPS")}
    env |= {"PYTHONPATH": str(SKEWED_CLOCK_DIR), **variables}
    before = time.time_ns()
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    child_ns, child_s, module_ns, module_s = run.stdout.split()
    return before, int(child_ns), float(child_s), module_ns, module_s


def test_an_offset_runs_the_wall_clock_that_far_ahead() -> None:
    before, child_ns, child_s, module_ns, module_s = _probe(**{CLOCK_OFFSET_VARIABLE: str(HOUR_NS)})
    after = time.time_ns()
    assert before + HOUR_NS <= child_ns <= after + HOUR_NS
    assert (before + HOUR_NS) / 1e9 - 1e-3 <= child_s <= (after + HOUR_NS) / 1e9 + 1e-3
    assert (module_ns, module_s) == ("sitecustomize", "sitecustomize")


def test_a_negative_offset_runs_it_behind() -> None:
    before, child_ns, _, _, _ = _probe(**{CLOCK_OFFSET_VARIABLE: str(-HOUR_NS)})
    assert before - HOUR_NS <= child_ns <= time.time_ns() - HOUR_NS


def test_a_step_whose_moment_passed_adds_to_the_offset_and_a_future_one_does_not() -> None:
    future = time.monotonic_ns() + 10 * HOUR_NS
    steps = f"0:{2 * HOUR_NS},{future}:{5 * HOUR_NS}"
    before, child_ns, _, _, _ = _probe(**{CLOCK_OFFSET_VARIABLE: str(HOUR_NS), "ROOTCAUSE_SIM_CLOCK_STEPS": steps})
    assert before + 3 * HOUR_NS <= child_ns <= time.time_ns() + 3 * HOUR_NS


def test_steps_alone_skew_the_clock_without_an_offset() -> None:
    before, child_ns, _, module_ns, _ = _probe(ROOTCAUSE_SIM_CLOCK_STEPS=f"0:{-HOUR_NS}")
    assert before - HOUR_NS <= child_ns <= time.time_ns() - HOUR_NS
    assert module_ns == "sitecustomize"


def test_without_offset_or_steps_the_clock_is_the_machines_own() -> None:
    before, child_ns, _, module_ns, module_s = _probe(**{CLOCK_OFFSET_VARIABLE: "0"})
    assert before <= child_ns <= time.time_ns()
    assert (module_ns, module_s) == ("time", "time")
