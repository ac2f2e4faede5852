"""``rootcause_harness/flyte2/console.py``: what the Flyte 2 UI shows, read from the prefix as it was at the
operator's decision (``error.pb`` before ``outputs.pb``), for given documents."""

from __future__ import annotations

from pathlib import Path

from flyteidl2.core import execution_pb2

from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.console import console_at_decision
from rootcause_harness.flyte2.job import JobResult, JobSpec
from rootcause_harness.flyte2.verdict import Verdict
from rootcause_harness.operator import JobPhase, OperatorDecision

REPORT = "[root cause] rank 3 (local rank 1, group rank 1) on worker train-worker-1 exited with SIGKILL"


def _result(tmp_path: Path, decision: OperatorDecision) -> JobResult:
    spec = JobSpec(task=training.train_2x2, nnodes=2, nproc_per_node=2, root=tmp_path / "bucket")
    return JobResult(spec=spec, run_name="sim", output_prefix=tmp_path / "prefix", sim_dir=tmp_path, pods=[],
                     fault_ns=None, placement={}, timed_out=False, operator=decision)


def _succeeded(tmp_path: Path, **files: bytes) -> JobResult:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        (snapshot / name.replace("_", ".")).write_bytes(data)
    return _result(tmp_path, OperatorDecision(JobPhase.SUCCEEDED, "train-worker-0", 0, 1, snapshot))


def _error_pb(message: str, kind: int = execution_pb2.ContainerError.RECOVERABLE) -> bytes:
    error = execution_pb2.ContainerError(code="USER:Failed", message=message, kind=kind)
    return execution_pb2.ErrorDocument(error=error).SerializeToString()


def test_an_error_pb_at_the_decision_shows_the_pod_and_rank_its_message_names(tmp_path: Path) -> None:
    view = console_at_decision(_succeeded(tmp_path, error_pb=_error_pb(REPORT), outputs_pb=b"o"))
    assert (view.outcome, view.worker, view.rank, view.message, view.recoverable) == (
        "error", "train-worker-1", 3, REPORT, True)
    assert view.line() == "operator: job=Succeeded at=train-worker-0 code=0 console=train-worker-1"


def test_a_non_recoverable_error_shows_as_such(tmp_path: Path) -> None:
    view = console_at_decision(_succeeded(tmp_path, error_pb=_error_pb(
        REPORT, execution_pb2.ContainerError.NON_RECOVERABLE)))
    assert (view.outcome, view.recoverable) == ("error", False)


def test_the_verdict_reader_given_reads_the_message(tmp_path: Path) -> None:
    read: list[str] = []

    def verdict(message: str) -> Verdict:
        read.append(message)
        return "train-worker-0", 1

    view = console_at_decision(_succeeded(tmp_path, error_pb=_error_pb("PyTorch worker(s) failed")), verdict)
    assert (view.worker, view.rank, read) == ("train-worker-0", 1, ["PyTorch worker(s) failed"])


def test_an_error_pb_that_is_no_error_document_is_a_failed_read(tmp_path: Path) -> None:
    view = console_at_decision(_succeeded(tmp_path, error_pb=b"\xff\xff\xff"))
    assert view.outcome == "read failed" and view.message.startswith("error.pb is not an ErrorDocument: ")
    assert view.worker is None


def test_outputs_without_an_error_are_a_success_and_neither_is_outputs_missing(tmp_path: Path) -> None:
    assert console_at_decision(_succeeded(tmp_path / "a", outputs_pb=b"o")).outcome == "success"
    missing = console_at_decision(_succeeded(tmp_path / "b", other_pb=b"x"))
    assert (missing.outcome, missing.worker, missing.line()) == (
        "outputs missing", None, "operator: job=Succeeded at=train-worker-0 code=0 console=none")


def test_a_failed_or_undecided_job_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "error.pb").write_bytes(_error_pb(REPORT))
    failed = console_at_decision(_result(tmp_path, OperatorDecision(JobPhase.FAILED, "train-worker-1", 137, 1)))
    assert (failed.outcome, failed.worker, failed.line()) == (
        "job failed", None, "operator: job=Failed at=train-worker-1 code=137 console=none")
    undecided = console_at_decision(_result(tmp_path, OperatorDecision(JobPhase.UNDECIDED)))
    assert (undecided.outcome, undecided.line()) == ("undecided", "operator: job=Undecided at=none code=none "
                                                                  "console=none")
