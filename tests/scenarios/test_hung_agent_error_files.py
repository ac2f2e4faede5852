"""Under the real patched entrypoint, a hung agent still leaves this pod's error files behind."""

from __future__ import annotations

import pytest

from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import list_names, new_prefixes, read_error, run_task

pytestmark = pytest.mark.slow


def test_watchdog_writes_the_root_cause_through_the_entrypoint_sink(file_store: ObjectStore) -> None:
    prefixes = new_prefixes(file_store, x=7, name="hung")
    run = run_task(file_store, prefixes, "hung_agent", "rank_one_fails_under_a_hung_agent", _F_WN="pod-hung")
    assert run.returncode == 0, run.stderr[-3000:]  # the document is written: the exit-0 contract
    names = list_names(file_store, prefixes.output)
    per_worker = [n for n in names if n.startswith("error-pod-hung-")]
    assert len(per_worker) == 1 and "error.pb" in names, names
    error = read_error(file_store, f"{prefixes.output}/{per_worker[0]}")
    assert error.message.startswith("[root cause] rank 1 (local rank 1, group rank 0) on worker pod-hung")
    assert "ValueError: root cause on rank 1 (input 7)" in error.message.splitlines()[0]
    assert "agent watchdog" in error.message
    assert error.worker == "pod-hung"
    assert read_error(file_store, f"{prefixes.output}/error.pb") == error
