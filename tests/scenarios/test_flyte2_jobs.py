"""Real Flyte 2 jobs on this machine: every pod the real ``a0`` entrypoint, spawned gloo workers on
loopback, local folders as the bucket (``rootcause_harness.flyte2``); what is checked is the
action's one ``error.pb``, as Flyte 2's backend reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flyteidl2.core import execution_pb2

from flyteplugins.rootcause.exceptions import ERROR_CODE
from rootcause_harness.faults import Fault, FaultKind
from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.job import JobResult, JobSpec, run_job
from rootcause_harness.flyte2.verdict import rootcause_verdict
from tests.flyte2_tasks import hung_agent, rank_outputs, reaped_worker

pytestmark = pytest.mark.slow


def _error_of(task: Any, tmp_path: Path) -> tuple[execution_pb2.ContainerError, JobResult]:
    fault = Fault(FaultKind.RAISE, pod="train-worker-1", local_rank=0)
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket", fault=fault, timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    assert not result.timed_out
    document = result.error_document
    assert document is not None, f"no error.pb; pod logs under {result.sim_dir}"
    return document.error, result


def test_a_raising_rank_is_named_in_error_pb_retryable_with_the_timeline_in_the_report(tmp_path: Path) -> None:
    """A plain exception is retried, as Flyte 2 retries any task's error but ``NonRecoverableError``."""
    error, result = _error_of(training.train_2x1, tmp_path)
    assert (error.code, error.kind) == (ERROR_CODE, execution_pb2.ContainerError.RECOVERABLE)
    assert rootcause_verdict(error.message) == ("train-worker-1", result.injected_rank) != (None, None)
    assert "injected failure on train-worker-1" in error.message.split("\n\n")[0]
    assert "Agreed by the failing pods: train-worker-0, train-worker-1." in error.message
    report = (result.output_prefix / "report.html").read_text()
    assert "Failure timeline" in report and "train-worker-1" in report and "root cause" in report


def test_a_root_cause_that_forbids_retries_is_non_recoverable_in_error_pb(tmp_path: Path) -> None:
    """The worker re-raised its failure as Flyte 2's ``NonRecoverableError``: every pod's ``error.pb``
    says so, though the other pod failed with a plain (retryable) victim's error."""
    error, result = _error_of(training.train_2x1_no_retry, tmp_path)
    assert (error.code, error.kind) == (ERROR_CODE, execution_pb2.ContainerError.NON_RECOVERABLE)
    assert rootcause_verdict(error.message) == ("train-worker-1", result.injected_rank) != (None, None)
    assert "NonRecoverableError" in error.message.split("\n\n")[0]


def test_the_demo_names_a_pod_that_vanished_whole_from_its_peers_agreed_word(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("rootcause-demo-flyte2")
    run = subprocess.run([str(script), "--fault", "vanish", "--output", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "error.pb: code ElasticRootCause, kind RECOVERABLE" in run.stdout
    assert "[lost pod] rank 2 (ranks 2-3) (group rank 1) on worker train-worker-1 " in run.stdout
    assert "named:    train-worker-1 rank None" in run.stdout


def test_the_watchdog_ends_a_hung_agent_s_pod_and_writes_the_root_cause_to_error_pb(tmp_path: Path) -> None:
    """The agent never notices rank 1's failure (its monitor loop blocks, ``tests/flyte2_tasks``): the
    engine's watchdog, in place of the zombie watchdog's silent exit, writes the root cause to the
    action's ``error.pb`` through the failure sink, then ends the pod, its lingering worker included."""
    spec = JobSpec(task=hung_agent.rank_one_fails_under_a_hung_agent, nnodes=1, nproc_per_node=2,
                   root=tmp_path / "bucket", timeout_s=120)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    assert [pod.returncode for pod in result.pods] == [0], logs  # error.pb written: the exit-0 contract
    document = result.error_document
    assert document is not None, logs
    first_line = document.error.message.splitlines()[0]
    assert first_line.startswith("[root cause] rank 1 ") and "ValueError: root cause on rank 1" in first_line, logs
    assert "the agent watchdog ended the pod" in document.error.message, logs
    assert (document.error.code, document.error.kind) == (ERROR_CODE, execution_pb2.ContainerError.RECOVERABLE)


def test_a_worker_reaped_before_torch_reads_its_exit_is_still_named_in_error_pb(tmp_path: Path) -> None:
    """torch's agent fails building its report when another part of the pod reaped the failed worker
    first (``tests/flyte2_tasks``): the failed rank is still the root cause in ``error.pb``, with its
    own error, and the pod exits 0 (the exit-0 contract)."""
    spec = JobSpec(task=reaped_worker.rank_one_fails_and_is_reaped_elsewhere, nnodes=1, nproc_per_node=2,
                   root=tmp_path / "bucket", timeout_s=120)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and [pod.returncode for pod in result.pods] == [0], logs
    document = result.error_document
    assert document is not None, logs
    first_line = document.error.message.splitlines()[0]
    assert first_line.startswith("[root cause] rank 1 ") and "ValueError: bad batch on rank 1" in first_line, logs
    # the pod's own report notes torch's error; the agreed one in error.pb holds the failures alone
    assert "torch's agent failed: TypeError" in result.pods[0].log_path.read_text(errors="replace"), logs


def test_a_succeeded_job_s_output_is_rank_0_s_and_no_pod_writes_an_error(tmp_path: Path) -> None:
    """Each rank returns its own value: the action's ``outputs.pb`` holds rank 0's, and the pod without
    rank 0 writes no ``error.pb`` (upstream's ``Elastic`` returns ``None`` there, which fails the
    output's type check and fails the action)."""
    spec = JobSpec(task=rank_outputs.each_rank_returns_its_own, nnodes=2, nproc_per_node=1,
                   root=tmp_path / "bucket", timeout_s=120)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and [pod.returncode for pod in result.pods] == [0, 0], logs
    assert result.error_pb == "missing", logs
    assert result.output == rank_outputs.BASE, logs
    assert not any("DataValidationError" in pod.log_path.read_text() for pod in result.pods), logs
