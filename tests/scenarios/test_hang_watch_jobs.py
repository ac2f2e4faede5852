"""A hung rank named in a minute or two with the collective timeout users run (30 minutes), and a rank
that only pauses (computing, writing) never named: real 2-pod x 2-worker jobs, judged where Flyte
reads them, at the training operator's decision.

A rank asleep in user code, on either flavour, and a rank stuck 90 s in a read run at default settings
(``hang_after_s`` 60 s): the hang watch (``rootcause_engine.agent.hang_watch``) must name the hung
rank (pod and rank, '[root cause] ... hung: it made no progress ...', its stack) and every pod must
have exited within 150 s of the hang, while each collective would wait 30 minutes. The other kinds of
hang, and a rank that computes or writes alone for longer than ``hang_after_s`` while its peers wait
(it moves its CPU time or its I/O: the job succeeds), run with ``hang_after_s`` at 10 s: the same
rule, a shorter wait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rootcause_core.timestamps import to_seconds
from rootcause_harness.faults import Fault, FaultKind
from rootcause_harness.flyte2 import training as flyte2_training
from rootcause_harness.flyte2.console import console_at_decision as flyte2_console
from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.operator import ConsoleView, JobPhase
from tests.elastic_tasks.long_timeout_training import (
    forked_soft_train_2x2_long_timeout_quick_hang,
    forked_train_2x2_long_timeout,
    forked_train_2x2_long_timeout_quick_hang,
)

pytestmark = pytest.mark.slow

#: The issue's target: the hung rank named and every pod gone within this long of the hang.
WITHIN_S = 150.0
#: What a healthy pause lasts: longer than the quick tasks' ``hang_after_s`` (10 s).
PAUSE_S = 15.0


def _flytekit_job(tmp_path: Path, fault: Fault, task=forked_train_2x2_long_timeout) -> JobResult:
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=2, store=StoreAccess(str(tmp_path / "store")), fault=fault,
                   timeout_s=240)
    result = run_job(spec, work_dir=tmp_path / "pods")
    assert not result.timed_out, f"pods did not exit within 240 s; logs in {result.sim_dir}"
    assert result.injected_rank is not None, f"the faulty worker never started training; logs in {result.sim_dir}"
    return result


def _assert_hung_rank_named(view: ConsoleView, result: object, logs: str) -> None:
    """The console at the decision names the injected pod and rank as hung, with its stack, and every
    pod exited within :data:`WITHIN_S` of the hang."""
    assert view.decision.phase == JobPhase.SUCCEEDED, (view, logs)
    assert (view.outcome, view.worker, view.rank) == ("error", result.injected_worker, result.injected_rank), (
        view, logs)
    first = view.message.splitlines()[0]
    assert first.startswith(f"[root cause] rank {result.injected_rank} ") and "hung: it made no progress" in first, (
        view.message)
    assert "before any collective timed out" in first, view.message
    if "stopped by a signal" not in first:  # a stopped worker cannot answer the probe for its stacks
        assert "in maybe_inject" in view.message or "in receive_from_next_rank" in view.message, view.message
    elapsed = to_seconds(max(pod.exited_ns for pod in result.pods) - result.fault_ns)
    assert elapsed < WITHIN_S, f"every pod exited {elapsed:.0f} s after the hang; {logs}"


@pytest.mark.parametrize(
    ("kind", "waited_in", "task"),
    [(FaultKind.HANG, "all_reduce #", forked_train_2x2_long_timeout),
     (FaultKind.RECV_HANG, "all_reduce #", forked_train_2x2_long_timeout_quick_hang),
     (FaultKind.FREEZE_WORKER, "process state T (stopped by a signal", forked_train_2x2_long_timeout_quick_hang)],
    ids=["asleep-in-user-code", "blocked-in-a-receive", "frozen-worker"],
)
def test_a_hung_rank_is_named_within_150_s_with_a_30_minute_collective_timeout(
    kind: FaultKind, waited_in: str, task: Any, tmp_path: Path
) -> None:
    """Rank 1 of pod 1 sleeps in user code (default settings), blocks in a receive from the next rank
    (which waits in the step's all-reduce for it), or is stopped (SIGSTOP: its agent and pod live on)
    at step 3; every collective's timeout is 30 minutes. The report names the rank and what it saw (a
    stopped process's state: it answers no probe)."""
    result = _flytekit_job(tmp_path, Fault(kind, pod="train-worker-1", local_rank=1), task=task)
    logs = f"pod logs in {result.sim_dir}"
    view = console_at_decision(result, aggregation=True)
    _assert_hung_rank_named(view, result, logs)
    assert waited_in in view.message.splitlines()[0], view.message
    if kind == FaultKind.RECV_HANG:
        assert "its own open send/recv waits for rank" in view.message.splitlines()[0], view.message


def test_a_hung_rank_in_a_ring_of_sends_and_receives_is_named(tmp_path: Path) -> None:
    """The step is a ring of blocking send/recv (no Flight Recorder number): the neighbours' open
    calls name the sleeping rank."""
    fault = Fault(FaultKind.HANG, pod="train-worker-1", local_rank=1, communication="send_recv")
    result = _flytekit_job(tmp_path, fault, task=forked_train_2x2_long_timeout_quick_hang)
    view = console_at_decision(result, aggregation=True)
    _assert_hung_rank_named(view, result, f"pod logs in {result.sim_dir}")
    assert "a point-to-point " in view.message.splitlines()[0], view.message


@pytest.mark.parametrize("kind", [FaultKind.COMPUTE, FaultKind.WRITE], ids=["computing", "writing-a-large-file"])
def test_a_rank_computing_or_writing_alone_for_longer_than_hang_after_s_is_not_hung(kind: FaultKind,
                                                                                   tmp_path: Path) -> None:
    """Rank 1 of pod 1 computes (CPU) or writes a large file at a slow device's pace (I/O, hardly any
    CPU) for 15 s while its peers wait in the all-reduce: longer than ``hang_after_s`` (10 s), and the
    job succeeds."""
    result = _flytekit_job(tmp_path, Fault(kind, pod="train-worker-1", local_rank=1, duration_s=PAUSE_S),
                           task=forked_train_2x2_long_timeout_quick_hang)
    logs = f"pod logs in {result.sim_dir}"
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    view = console_at_decision(result, aggregation=True)
    assert (view.decision.phase, view.outcome) == (JobPhase.SUCCEEDED, "success"), (view, logs)
    assert not any("hang watch" in pod.log_path.read_text(errors="replace") for pod in result.pods), logs
    assert to_seconds(max(pod.exited_ns for pod in result.pods) - result.fault_ns) >= PAUSE_S, logs


def test_a_rank_stuck_90_s_in_a_read_that_then_returns_lets_the_job_succeed(tmp_path: Path) -> None:
    """Rank 1 of pod 1 blocks 90 s in a read (a stalled storage: no CPU, no I/O counted) while its
    peers wait in the all-reduce, far past ``hang_after_s``: its thread's wait is an I/O wait, judged
    against ``io_wait_after_s``, and the job trains on and succeeds, as under plain ``Elastic``."""
    result = _flytekit_job(tmp_path, Fault(FaultKind.IO_STALL, pod="train-worker-1", local_rank=1, duration_s=90))
    logs = f"pod logs in {result.sim_dir}"
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    view = console_at_decision(result, aggregation=True)
    assert (view.decision.phase, view.outcome) == (JobPhase.SUCCEEDED, "success"), (view, logs)
    assert to_seconds(max(pod.exited_ns for pod in result.pods) - result.fault_ns) >= 90, logs


def test_flyte_2_names_a_hung_rank_in_error_pb_within_150_s(tmp_path: Path) -> None:
    spec = Flyte2JobSpec(task=flyte2_training.train_2x2_long_timeout, nnodes=2, nproc_per_node=2,
                         root=tmp_path / "bucket", fault=Fault(FaultKind.HANG, pod="train-worker-1", local_rank=1),
                         timeout_s=240)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    _assert_hung_rank_named(flyte2_console(result), result, logs)


def test_under_the_soft_policy_a_hung_node_fails_like_a_failed_one(tmp_path: Path) -> None:
    """``restart_policy="soft"``: the hung node's workers are ended and its failure diagnosed as any
    local failure; a hang is no recoverable error for flytekit, so the job ends, the hung rank named."""
    result = _flytekit_job(tmp_path, Fault(FaultKind.HANG, pod="train-worker-1", local_rank=1),
                           task=forked_soft_train_2x2_long_timeout_quick_hang)
    view = console_at_decision(result, aggregation=True)
    _assert_hung_rank_named(view, result, f"pod logs in {result.sim_dir}")
