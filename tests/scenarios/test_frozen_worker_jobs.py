"""A frozen worker (SIGSTOP: its pod and agent alive) is named at a short collective timeout too.

With 30-minute timeouts the hang watch names it (``test_hang_watch_jobs.py``); with 8 s its peers'
collective times out first, long before ``hang_after_s``. A stopped process answers no probe, so
the teardown's probe finds it silent; its state (``T``) and its progress beacon, silent since
before the peers timed out, make it the hung root cause, and its peers victims. A real 2-pod x
2-worker job (about a minute), judged where Flyte reads it: at the training operator's decision.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rootcause_harness.faults import Fault, FaultKind
from rootcause_harness.flyte2.console import console_at_decision as flyte2_console
from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, run_job
from rootcause_harness.operator import ConsoleView, JobPhase
from tests.scenarios.frozen_worker_flyte2_tasks import train_2x2_8s_timeout
from tests.scenarios.frozen_worker_tasks import forked_train_2x2_8s_timeout

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("local_rank", [1, 0])
def test_a_frozen_worker_is_named_at_an_8_s_collective_timeout(local_rank: int, tmp_path: Path) -> None:
    """Rank ``local_rank`` of pod 1 is stopped at step 3; its peers (the other rank of its pod
    among them) time out 8 s later. The console at the decision names its pod and rank, hung."""
    fault = Fault(FaultKind.FREEZE_WORKER, pod="train-worker-1", local_rank=local_rank)
    spec = JobSpec(task=forked_train_2x2_8s_timeout, nnodes=2, nproc_per_node=2,
                   store=StoreAccess(str(tmp_path / "store")), fault=fault, timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, f"pods did not exit within 180 s; {logs}"
    assert result.injected_rank is not None, f"the faulty worker never started training; {logs}"
    _assert_frozen_worker_named(console_at_decision(result, aggregation=True), result, logs)


def test_flyte_2_names_a_frozen_worker_at_an_8_s_collective_timeout(tmp_path: Path) -> None:
    spec = Flyte2JobSpec(task=train_2x2_8s_timeout, nnodes=2, nproc_per_node=2, root=tmp_path / "bucket",
                         fault=Fault(FaultKind.FREEZE_WORKER, pod="train-worker-1", local_rank=1), timeout_s=180)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, f"pods did not exit within 180 s; {logs}"
    assert result.injected_rank is not None, f"the faulty worker never started training; {logs}"
    _assert_frozen_worker_named(flyte2_console(result), result, logs)


def _assert_frozen_worker_named(view: ConsoleView, result: object, logs: str) -> None:
    assert view.decision.phase == JobPhase.SUCCEEDED, (view, logs)
    assert (view.outcome, view.worker, view.rank) == ("error", result.injected_worker, result.injected_rank), (
        view, logs)
    first = view.message.splitlines()[0]
    assert first.startswith(f"[root cause] rank {result.injected_rank} ") and " hung: " in first, (view.message, logs)
    assert "stopped by a signal" in first, (view.message, logs)
