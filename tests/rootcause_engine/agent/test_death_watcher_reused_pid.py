"""A restarted attempt's worker that gets a dead worker's pid is alive, not that worker's exit (issue 50).

Real processes in a pid namespace of the test's own (``testbed/pid_reuse.py``): attempt 0's worker
exits 1 and is reaped, ``ns_last_pid`` hands its pid to attempt 1's worker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from testbed.pid_reuse import reuse_command


def _in_own_pid_namespace() -> dict[str, object]:
    run = subprocess.run(reuse_command(sys.executable), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_worker_with_a_reused_pid_is_alive_and_the_watchdog_sees_no_failure() -> None:
    result = _in_own_pid_namespace()
    assert result["reused"], result  # the recipe worked: attempt 1's worker has attempt 0's pid
    # attempt 0's worker still failed with 1, in the record of attempt 0
    assert (result["old_exitcode"], result["attempt_0_exitcode"]) == (1, 1)
    # attempt 1's worker runs: the kernel is asked, not the old record
    assert not result["confirmed_exit"]
    assert (result["snapshot_exited"], result["snapshot_failed"], result["deadline"]) == (0, False, None)
    assert not result["hung_a_minute_later"]
    # and its own end is seen (it was watched afresh): SIGTERM, not the old exit 1
    assert result["new_signal"] == 15
