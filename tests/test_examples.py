"""The examples run with `pyflyte run` as the README says, and show the root-cause report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYFLYTE = str(Path(sys.executable).with_name("pyflyte"))


def _pyflyte_run(tmp_path: Path, example: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pyflyte run examples/<example> ...`` as a user runs it locally (no backend variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_INTERNAL", "_F_"))}
    return subprocess.run(
        [PYFLYTE, "run", str(REPO / "examples" / example), *args],
        cwd=tmp_path, env=env | {"COLUMNS": "200"}, capture_output=True, text=True, timeout=240, check=False,
    )


@pytest.mark.slow
def test_training_example_fails_with_the_root_cause_report(tmp_path: Path) -> None:
    completed = _pyflyte_run(tmp_path, "training_workflow.py", "training_wf", "--fail_rank", "1")
    output = completed.stdout + completed.stderr
    assert completed.returncode != 0
    assert "[root cause] rank 1 (local rank 1, group rank 0)" in output
    assert "ValueError: corrupt shard read by rank 1 in epoch 1" in output
    assert "Other failures (1):" in output


@pytest.mark.slow
def test_soft_restart_example_heals_a_recoverable_failure_and_returns(tmp_path: Path) -> None:
    completed = _pyflyte_run(tmp_path, "soft_restart.py", "soft_restart_wf", "--fail_rank", "1")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "soft restart: leaving the world, restarting this node's workers" in output
    assert "spot node reclaimed under rank 1 at step 50" in output
    assert float(completed.stdout.strip().splitlines()[-1]) < 1.0  # the fitted loss, printed by pyflyte run
