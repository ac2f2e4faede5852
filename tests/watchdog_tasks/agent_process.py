"""Run an agent module (``python -m tests.watchdog_tasks.<module> OUT_JSON MARKER_DIR``) as a pod would.

The agent and its workers run in their own process group, so that nothing survives a failed test;
the group is killed when the block ends, after the test had its look at what was left running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class AgentRun:
    returncode: int
    stderr: str
    document: dict[str, Any] | None  # what the failure sink received, if anything


@contextlib.contextmanager
def agent_process(module: str, tmp_path: Path, worker_name: str, timeout_s: float) -> Iterator[AgentRun]:
    """Run ``tests.watchdog_tasks.<module>`` to its end (failing the test after ``timeout_s``)."""
    out, markers = tmp_path / "root-cause.json", tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "FLYTE_INTERNAL_WORKER_NAME": worker_name}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", f"tests.watchdog_tasks.{module}", str(out), str(markers)]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ) as agent:  # fmt: skip
        try:
            try:
                _, stderr = agent.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the agent ({module}) was not ended within {timeout_s} s")
            document = json.loads(out.read_text()) if out.exists() else None
            yield AgentRun(agent.returncode, stderr, document)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent.pid, signal.SIGKILL)
            agent.communicate()
