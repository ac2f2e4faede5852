"""``rootcause_harness/flyte2/demo.py`` (``rootcause-demo-flyte2``) without running a job: its options, the
task and fault it asks for, and its verdict and exit code on given results (``run_job`` stood in for by one
that lays out the files a finished job leaves)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from flyteidl2.core import execution_pb2

from rootcause_harness.faults import FAULTY_POD_FILE, Fault, FaultKind
from rootcause_harness.flyte2 import demo, training
from rootcause_harness.flyte2.job import JobResult, JobSpec
from rootcause_harness.operator import JobPhase, OperatorDecision

PLACEMENT = {0: ("train-worker-0", 0), 1: ("train-worker-0", 1), 2: ("train-worker-1", 0), 3: ("train-worker-1", 1)}
RIGHT = "[root cause] rank 3 (local rank 1, group rank 1) on worker train-worker-1 exited with SIGKILL"


def _fake_run_job(error_pb: bytes | None, specs: list[JobSpec]) -> Callable[..., JobResult]:
    """A ``run_job`` whose job left ``error_pb`` (``None``: none) and ended Succeeded with it."""

    def run_job(spec: JobSpec, work_dir: Path) -> JobResult:
        specs.append(spec)
        prefix, sim_dir, snapshot = work_dir / "data" / "a0", work_dir / "sim", work_dir / "snapshot"
        for folder in (prefix, sim_dir, snapshot):
            folder.mkdir(parents=True)
        assert spec.fault is not None
        (sim_dir / FAULTY_POD_FILE).write_text(spec.fault.pod)
        if error_pb is not None:
            (prefix / "error.pb").write_bytes(error_pb)
            (snapshot / "error.pb").write_bytes(error_pb)
        decision = OperatorDecision(JobPhase.SUCCEEDED, "train-worker-0", 0, 1, snapshot)
        return JobResult(spec=spec, run_name="sim", output_prefix=prefix, sim_dir=sim_dir, pods=[], fault_ns=None,
                         placement=PLACEMENT, timed_out=False, operator=decision)

    return run_job


def _document(message: str) -> bytes:
    error = execution_pb2.ContainerError(code="USER:Failed", message=message,
                                         kind=execution_pb2.ContainerError.RECOVERABLE)
    return execution_pb2.ErrorDocument(error=error).SerializeToString()


def _demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error_pb: bytes | None,
          *args: str) -> tuple[int, str, list[JobSpec]]:
    specs: list[JobSpec] = []
    monkeypatch.setattr(demo, "run_job", _fake_run_job(error_pb, specs))
    run = CliRunner().invoke(demo.main, ["--output", str(tmp_path), *args])
    return run.exit_code, run.output, specs


def test_the_demo_names_the_injected_worker_and_exits_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, output, [spec] = _demo(monkeypatch, tmp_path, _document(RIGHT))
    assert code == 0, output
    assert spec.task is training.train_2x2 and (spec.nnodes, spec.nproc_per_node) == (2, 2)
    assert spec.fault == Fault(FaultKind.SIGKILL, pod="train-worker-1", local_rank=1, second_pod="train-worker-0")
    assert spec.root == tmp_path.resolve() / "bucket"
    assert "named:    train-worker-1 rank 3\ninjected: train-worker-1 rank 3\n" in output
    assert "error.pb: code USER:Failed, kind RECOVERABLE\n" in output
    assert "operator: job=Succeeded at=train-worker-0 code=0 console=train-worker-1" in output


def test_an_error_naming_another_worker_fails_the_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wrong = RIGHT.replace("rank 3", "rank 0").replace("train-worker-1", "train-worker-0")
    code, output, _ = _demo(monkeypatch, tmp_path, _document(wrong))
    assert code == 1 and output.endswith("The action's error names another worker than the injected fault.\n")


@pytest.mark.parametrize(("error_pb", "why"), [(None, "was written"), (b"\xff\xff\xff", "could be read")])
def test_no_readable_error_pb_fails_the_demo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error_pb: bytes | None,
                                             why: str) -> None:
    code, output, _ = _demo(monkeypatch, tmp_path, error_pb)
    assert code == 1 and f"No error.pb {why}" in output


def test_the_upstream_run_reads_elastics_error_through_the_placement(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    message = "ChildFailedError\nPyTorch worker(s) failed:\n  rank 3: exitcode=-9"
    code, output, [spec] = _demo(monkeypatch, tmp_path, _document(message), "--upstream")
    assert code == 0, output
    assert spec.task is training.train_2x2_elastic
    assert "flyteplugins.pytorch.Elastic" in output and "named:    train-worker-1 rank 3" in output


@pytest.mark.parametrize(("args", "task"), [(["--fault", "hang"], training.train_2x2_short_timeout),
                                            (["--fault", "hang", "--upstream"],
                                             training.train_2x2_elastic_short_timeout)])
def test_a_hang_runs_the_short_timeout_task(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str],
                                            task: object) -> None:
    _, _, [spec] = _demo(monkeypatch, tmp_path, _document(RIGHT), *args)
    assert spec.task is task and spec.fault is not None and spec.fault.kind == FaultKind.HANG


def test_the_pod_and_local_rank_options_pick_the_faulty_worker(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    message = "[root cause] rank 0 (local rank 0, group rank 0) on worker train-worker-0 raised"
    code, output, [spec] = _demo(monkeypatch, tmp_path, _document(message), "--fault", "raise", "--pod", "0",
                                 "--local-rank", "0")
    assert code == 0, output
    assert spec.fault == Fault(FaultKind.RAISE, pod="train-worker-0", local_rank=0, second_pod="train-worker-1")


@pytest.mark.parametrize("args", [["--pod", "2"], ["--local-rank", "2"], ["--fault", "melt"]])
def test_out_of_range_options_are_refused_before_any_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         args: list[str]) -> None:
    code, output, specs = _demo(monkeypatch, tmp_path, None, *args)
    assert code == 2 and "Invalid value" in output and specs == []
