"""A hung agent is ended by the watchdog, which still writes the root cause first.

Runs a real agent in a subprocess (``tests/watchdog_tasks/hung_agent.py``) whose monitor loop
blocks forever: the agent never notices that rank 1 raised and rank 2 aborted (SIGABRT, as the NCCL
watchdog does), never tears rank 0 down, never returns. Only the agent watchdog can end it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.watchdog_tasks.agent_process import agent_process

pytestmark = pytest.mark.slow

WORKER_NAME = "hung-pod-0"
TIMEOUT_S = 240


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper has ended: not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_watchdog_ends_a_hung_agent_and_writes_the_root_cause(tmp_path: Path) -> None:
    with agent_process("hung_agent", tmp_path, WORKER_NAME, TIMEOUT_S) as run:
        assert run.returncode == 0, run.stderr[-3000:]  # the document is written: the exit-0 contract
        document = run.document
        assert document is not None
        # the report also reached stderr (the pod log), and no worker outlived the agent
        assert "[root cause] rank 1" in run.stderr
        assert not [failure["pid"] for failure in document["failures"] if _alive(failure["pid"])]

    assert document["type"] == "ElasticRootCauseError"
    first_line = document["report"].splitlines()[0]
    assert first_line.startswith(f"[root cause] rank 1 (local rank 1, group rank 0) on worker {WORKER_NAME} ")
    assert "ValueError: root cause on rank 1" in first_line
    assert "the agent watchdog ended the pod" in document["report"]
    assert document["failures"][0]["rank"] == 1
    by_rank = {failure["rank"]: failure for failure in document["failures"]}
    assert (by_rank[2]["role"], by_rank[2]["signal"]) == ("candidate", "SIGABRT")
    assert (by_rank[0]["role"], by_rank[0]["signal"]) == ("victim", "SIGKILL")  # it ignored SIGTERM
