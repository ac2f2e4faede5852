"""The README's first command: ``rootcause-demo`` runs the job, names the injected worker, exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_names_the_injected_worker_in_both_readers(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rootcause-demo")
    run = subprocess.run([str(script), "--output", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "root cause: train-worker-1 rank " in run.stdout
    injected = next(line for line in lines if line.startswith("injected:"))
    reported = next(line for line in lines if line.startswith("root cause:"))
    assert reported.split(":", 1)[1].strip() == injected.split(":", 1)[1].strip()
    assert "Flyte console after the last exit (upstream rule, aggregation on): train-worker-1" in run.stdout
    [operator] = [line for line in lines if line.startswith("operator: ")]  # one line, for scripts
    assert operator.startswith("operator: job=Succeeded at=train-worker-") and operator.endswith(
        " code=0 console=train-worker-1"
    ), operator
