"""The watchdog's hang deadline does not move when the pod's wall clock steps (issue 50).

A real agent-side process (the death watcher, the ledger, the watchdog's snapshot) whose wall clock
the harness's ``skewed_clock`` steps as NTP would: +61 s after a worker failed (the hang timeout is
60 s), then -122 s. Neither step may fire the hang check early, nor put it off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests import REPO_ROOT

S = 1_000_000_000
SKEWED_CLOCK_DIR = REPO_ROOT / "rootcause_harness" / "skewed_clock"
#: Long enough for the child to import the engine and see its worker fail before the first step.
FIRST_STEP_AFTER_S = 12
SECOND_STEP_AFTER_S = 14

CHILD = """
import json, subprocess, time
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.watchdog import WatchdogSettings, hang_deadline_ns, is_hung, take_snapshot

steps = [int(item.split(":")[0]) for item in STEPS.split(",")]
settings = WatchdogSettings(interval_s=1, hang_timeout_s=60, teardown_grace_s=5)
looks = []
with DeathWatcher() as watcher:
    observer = LaunchObserver(watcher)
    worker = subprocess.Popen(["/bin/sh", "-c", "exit 1"])
    observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, worker.pid, ""))
    while watcher.exit_of(worker.pid) is None:
        time.sleep(0.005)
    failed_mono = time.monotonic_ns()
    for moment in [failed_mono, *steps]:
        while time.monotonic_ns() < moment:
            time.sleep(0.01)
        snapshot = take_snapshot(observer)
        looks.append({
            "hung": is_hung(snapshot, settings),
            "left_s": (hang_deadline_ns(snapshot, settings) - snapshot.now_ns) / 1e9,
            "elapsed_s": (time.monotonic_ns() - failed_mono) / 1e9,
            "wall_ahead_s": (time.time_ns() - time.clock_gettime_ns(time.CLOCK_REALTIME)) / 1e9,
        })
    worker.wait()
print(json.dumps({"before_first_step": failed_mono < steps[0], "looks": looks}))
"""


def test_a_wall_clock_step_neither_fires_the_hang_check_nor_delays_it() -> None:
    now = time.monotonic_ns()
    steps = f"{now + FIRST_STEP_AFTER_S * S}:{61 * S},{now + SECOND_STEP_AFTER_S * S}:{-122 * S}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SKEWED_CLOCK_DIR), os.environ.get("PYTHONPATH", "")]),
        "ROOTCAUSE_SIM_CLOCK_STEPS": steps,
    }
    run = subprocess.run([sys.executable, "-c", f"STEPS = {steps!r}\n{CHILD}"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["before_first_step"], "the worker failed after the first step: raise FIRST_STEP_AFTER_S"
    failed, ahead, behind = result["looks"]
    # the clock did step, in the process under test
    assert (round(failed["wall_ahead_s"]), round(ahead["wall_ahead_s"]), round(behind["wall_ahead_s"])) == (0, 61, -61)
    for look in (failed, ahead, behind):
        assert not look["hung"], look
        # a minute from the failure on the monotonic clock: not 61 s less, not 61 s more
        assert abs(look["left_s"] - (60 - look["elapsed_s"])) < 2, look
