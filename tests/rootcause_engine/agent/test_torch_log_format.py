"""torch's log formatter must not import ``torch._dynamo`` when the agent logs a worker failure.

Checked in a fresh interpreter (the test process may have imported dynamo already): an exception
logged by torch's elastic multiprocessing logger inside ``exceptions_preformatted()`` reaches the
log with its traceback, and ``torch._dynamo`` stays unimported; without the filter, torch imports it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROGRAM = """
import sys
import torch  # sets up torch's own log handlers
from torch.distributed.elastic.multiprocessing import api
from rootcause_engine.agent.torch_log_format import exceptions_preformatted

context = exceptions_preformatted() if sys.argv[1] == "filtered" else __import__("contextlib").nullcontext()
with context:
    try:
        raise ValueError("worker failed: marker-42")
    except ValueError:
        api.logger.exception("failed (exitcode: 1) local_rank: 0")
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""


@pytest.mark.parametrize(("mode", "dynamo_imported"), [("filtered", False), ("plain", True)])
def test_a_logged_worker_failure_keeps_its_traceback_without_importing_dynamo(mode: str, dynamo_imported: bool) -> None:
    done = subprocess.run([sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"dynamo imported: {dynamo_imported}" in done.stdout
    assert "failed (exitcode: 1) local_rank: 0" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert "ValueError: worker failed: marker-42" in done.stderr
