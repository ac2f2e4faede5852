"""``rootcause_harness/flytekit/console.py``: what the Flyte 1 console shows, read from the prefix as it was
at the operator's decision, with distributed error aggregation (the earliest ``error*.pb``) and without
(``error.pb`` alone), for given documents."""

from __future__ import annotations

from pathlib import Path

from flyteidl.core import errors_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from rootcause_harness.flytekit import training
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess
from rootcause_harness.operator import JobPhase, OperatorDecision


def _document(worker: str, message: str, seconds: int, *, recoverable: bool = True) -> bytes:
    kind = errors_pb2.ContainerError.RECOVERABLE if recoverable else errors_pb2.ContainerError.NON_RECOVERABLE
    error = errors_pb2.ContainerError(code="USER:Failed", message=message, kind=kind, worker=worker,
                                      timestamp=Timestamp(seconds=seconds))
    return errors_pb2.ErrorDocument(error=error).SerializeToString()


def _report(rank: int, worker: str) -> str:
    return f"[root cause] rank {rank} (local rank 1, group rank 1) on worker {worker} exited with SIGKILL"


def _result(tmp_path: Path, decision: OperatorDecision) -> JobResult:
    spec = JobSpec(task=training.train_2x2, nnodes=2, nproc_per_node=2, store=StoreAccess(str(tmp_path / "store")))
    return JobResult(spec=spec, execution_id="sim", output_prefix=str(tmp_path / "store"), raw_output_prefix="",
                     sim_dir=tmp_path, pods=[], fault_ns=None, placement={}, timed_out=False, operator=decision)


def _succeeded(tmp_path: Path, files: dict[str, bytes]) -> JobResult:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    return _result(tmp_path, OperatorDecision(JobPhase.SUCCEEDED, "train-worker-0", 0, 1, snapshot))


def test_with_aggregation_the_earliest_error_file_is_shown(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {
        "error-train-worker-0-a.pb": _document("train-worker-0", _report(1, "train-worker-0"), 200),
        "error-train-worker-1-b.pb": _document("train-worker-1", _report(3, "train-worker-1"), 100,
                                               recoverable=False),
        "outputs.pb": b"o",
    })
    view = console_at_decision(result)
    assert (view.outcome, view.worker, view.rank, view.recoverable) == ("error", "train-worker-1", 3, False)
    assert view.message == _report(3, "train-worker-1")
    assert view.line() == "operator: job=Succeeded at=train-worker-0 code=0 console=train-worker-1"


def test_without_aggregation_only_error_pb_is_read(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {
        "error-train-worker-1-b.pb": _document("train-worker-1", _report(3, "train-worker-1"), 100),
        "error.pb": _document("train-worker-0", _report(0, "train-worker-0"), 200),
    })
    view = console_at_decision(result, aggregation=False)
    assert (view.outcome, view.worker, view.rank) == ("error", "train-worker-0", 0)


def test_without_aggregation_a_worker_file_alone_is_no_error(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {"error-train-worker-1-b.pb": _document("train-worker-1", "boom", 100),
                                   "outputs.pb": b"o"})
    assert console_at_decision(result, aggregation=False).outcome == "success"
    assert console_at_decision(result, aggregation=True).worker == "train-worker-1"


def test_the_rank_reader_given_reads_the_message(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {"error.pb": _document("train-worker-1", "rank 3: exitcode=-9", 1)})
    view = console_at_decision(result, rank_of=lambda message: int(message.split()[1].rstrip(":")))
    assert (view.worker, view.rank) == ("train-worker-1", 3)
    assert console_at_decision(result).rank is None  # no report line: this plugin's reader names no rank


def test_an_unreadable_error_file_fails_the_read(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {"error-x.pb": b"\xff\xff\xff", "outputs.pb": b"o"})
    view = console_at_decision(result)
    assert view.outcome == "read failed" and "not an ErrorDocument" in view.message and view.worker is None


def test_a_document_without_an_error_names_no_worker(tmp_path: Path) -> None:
    result = _succeeded(tmp_path, {"error.pb": errors_pb2.ErrorDocument().SerializeToString()})
    view = console_at_decision(result)
    assert (view.outcome, view.worker, view.rank) == ("error", None, None)
    assert view.message.startswith("error not formatted correctly")


def test_no_error_and_no_outputs_is_outputs_missing(tmp_path: Path) -> None:
    assert console_at_decision(_succeeded(tmp_path, {"inputs.pb": b"i"})).outcome == "outputs missing"


def test_a_failed_or_undecided_job_reads_nothing(tmp_path: Path) -> None:
    failed = console_at_decision(_result(tmp_path, OperatorDecision(JobPhase.FAILED, "train-worker-1", 1, 1)))
    assert (failed.outcome, failed.worker, failed.message) == ("job failed", None, "")
    assert console_at_decision(_result(tmp_path, OperatorDecision(JobPhase.UNDECIDED))).outcome == "undecided"
