"""Under ``start_method="fork"`` the failing worker's own exception is the root cause, every time.

Before the fixes (``DeathWatcher.paused`` around the fork; a truncated torch traceback pickle of a
worker SIGTERMed while unwinding turned into that worker's failure), rank 1 here died by SIGSEGV in
most launches run back to back by a script on this machine, or the launch ended with torch's "Ran
out of input". The launches run in a fresh process, as a script runs them (inside pytest's process
the crash did not show).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHES = 4


def test_a_forked_worker_s_exception_is_the_root_cause_in_every_launch() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "tests.elastic_tasks.fork_start", str(LAUNCHES)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(verdicts) == LAUNCHES, done.stderr[-3000:]
    expected = {"rank": 1, "role": "candidate", "exitcode": 1, "signal": None, "type": "builtins.ValueError"}
    assert verdicts == [expected] * LAUNCHES
