"""Worker stand-ins with the hang probe installed, started and waited for until they are where a test
probes them.

Why a marker beyond the probe's own ready file: the ready file is written inside
``install_hang_probe``, so a probe sent as soon as it appears can be answered from there, before
the stand-in reaches the function the test looks for in its stacks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rootcause_engine.agent.worker_progress import process_tree_usage
from rootcause_engine.worker.hang_probe import READY_FILE_NAME

#: How long any wait here may take before the test fails: a bound, not a speed claim.
NEVER_S = 120.0
#: Written by the stand-in from inside the function it then stays in.
STUCK_FILE_NAME = "stuck"
#: CPU time a native spinner must have used after its marker: the few bytecodes between the marker
#: and its C call take microseconds, so by then it is in the C call whatever the machine's load.
SPINNING_CPU_S = 0.5

#: ``argv``: the error file the probe is installed for, the mode, "torch" to load torch first (the
#: probe's Flight Recorder dump needs it loaded, as in a worker), the stuck marker's name.
_STAND_IN = """
import os, sys, time
if sys.argv[3] == "torch":
    import torch
from rootcause_engine.worker.hang_probe import install_hang_probe
assert install_hang_probe(sys.argv[1])
def mark_stuck():
    open(os.path.join(os.path.dirname(sys.argv[1]), sys.argv[4]), "w").close()
def stuck_in_user_code():
    mark_stuck()
    while True:
        time.sleep(3600)
def stuck_in_native_code():
    mark_stuck()
    sum(range(10**13))  # one C call: no Python signal handler runs until it returns
{"sleep": stuck_in_user_code, "native": stuck_in_native_code}[sys.argv[2]]()
"""


def start_probed_worker(error_dir: Path, mode: str = "sleep", *, with_torch: bool = False) -> subprocess.Popen[bytes]:
    """Start a stand-in whose error file is ``error_dir/error.json`` and return once it is stuck:
    ``sleep`` in ``stuck_in_user_code``, ``native`` inside one C call of ``stuck_in_native_code``."""
    error_file = error_dir / "error.json"
    args = [sys.executable, "-c", _STAND_IN, str(error_file), mode, "torch" if with_torch else "-", STUCK_FILE_NAME]
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + NEVER_S
    while not ((error_dir / READY_FILE_NAME).exists() and (error_dir / STUCK_FILE_NAME).exists()):
        assert proc.poll() is None, "the stand-in died before it got stuck"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if mode == "native":
        _wait_spinning(proc)
    return proc


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    usage = process_tree_usage(proc.pid)
    assert usage is not None, "the spinner is gone"
    return usage.cpu_s


def _wait_spinning(proc: subprocess.Popen[bytes]) -> None:
    start = _cpu_s(proc)
    deadline = time.monotonic() + NEVER_S
    while _cpu_s(proc) - start < SPINNING_CPU_S:
        assert proc.poll() is None, "the spinner died"
        assert time.monotonic() < deadline
        time.sleep(0.05)
