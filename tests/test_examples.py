"""The examples run with `pyflyte run` as the README says, and show the root-cause report."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from flyteidl2.core import execution_pb2

from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flyte2.verdict import rootcause_verdict
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, run_job
from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import read_outputs

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


@pytest.mark.slow
def test_soft_restart_example_keeps_its_survivors_with_two_pods(
    file_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's loop as a 2-pod PyTorchJob (spawned workers, as kfpytorch starts them): rank 1
    fails once; the other pod's workers survive the gloo error their all-reduce raises (a plain
    RuntimeError: ``soft_restart.is_peer_failure`` tells it from their own), go on in the smaller
    world, take the restarted pod back, and the job fits its line."""
    monkeypatch.setenv("EXAMPLE_NNODES", "1:2")  # read when the example is imported, here and in each pod
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.delitem(sys.modules, "examples.soft_restart", raising=False)
    example = importlib.import_module("examples.soft_restart")
    spec = JobSpec(task=example.train, nnodes=2, nproc_per_node=2, store=StoreAccess(file_store.root),
                   inputs={"steps": 200, "fail_rank": 1, "fail_step": 50}, timeout_s=200)
    result = run_job(spec, work_dir=tmp_path)
    logs = {pod.name: pod.log_path.read_text(errors="replace") for pod in result.pods}
    where = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and all(pod.returncode == 0 for pod in result.pods), where
    (failed,) = [pod for pod, log in logs.items() if "spot node reclaimed under rank 1 at step 50" in log]
    (survivor,) = set(logs) - {failed}
    assert "restarting this node's workers" in logs[failed], where
    assert "restarting this node's workers" not in logs[survivor], where  # its workers kept going
    assert "declaring it lost" not in logs[failed] + logs[survivor], where
    loss = read_outputs(file_store, result.output_prefix).literals["o0"].scalar.primitive.float_value
    assert loss < 1.0, where


@pytest.mark.slow
@pytest.mark.timeout(660)  # the job's own limit below, and the pods' teardown
def test_flyte2_training_example_names_the_killed_rank_in_error_pb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Flyte 2 example as a 2-pod job, every pod the real ``a0``: rank 3 is SIGKILLed (as the OOM
    killer ends a worker); the action's one ``error.pb`` names it, its pod and its signal first,
    retryable, and the report shows the timeline."""
    monkeypatch.setenv("EXAMPLE_NNODES", "2")  # read when the example is imported, here and in each pod
    monkeypatch.delenv("ROOTCAUSE_REGISTRY", raising=False)
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.delitem(sys.modules, "examples.flyte2_training", raising=False)
    example = importlib.import_module("examples.flyte2_training")
    # the killed rank dies again in each of the example's 3 restarts (torch's max_restarts), each a
    # fresh spawn of 4 workers that import torch: on a loaded machine that takes minutes, so the limit
    # only guards against a hang
    spec = Flyte2JobSpec(task=example.train, nnodes=2, nproc_per_node=2, root=tmp_path / "bucket",
                         inputs={"fail_rank": 3, "fault": "oom_kill"}, timeout_s=600)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    where = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, where
    document = result.error_document
    assert document is not None, where
    first_line = document.error.message.splitlines()[0]
    pod, rank = rootcause_verdict(document.error.message)
    assert rank == 3 and pod in {"train-worker-0", "train-worker-1"}, (first_line, where)
    assert "(local rank 1, group rank 1)" in first_line and "SIGKILL" in first_line, (first_line, where)
    assert f"[victim] rank 1 (local rank 1, group rank 0) on worker {pod}" not in document.error.message, where
    assert document.error.kind == execution_pb2.ContainerError.RECOVERABLE, where
    assert "Failure timeline" in (result.output_prefix / "report.html").read_text(), where


@pytest.mark.parametrize("value", ["2", "1:4"])
def test_every_example_reads_example_nnodes_the_same_way(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``EXAMPLE_NNODES`` is a number of pods or a ``min:max`` range, as ``Elastic``'s ``nnodes``, in
    every example that reads it: a number stays an int (``Elastic`` treats ``1`` and ``"1"`` apart),
    but for soft restarts, which need a range, where ``N`` is ``N:N``."""
    monkeypatch.setenv("EXAMPLE_NNODES", value)
    monkeypatch.delenv("ROOTCAUSE_REGISTRY", raising=False)
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.syspath_prepend(str(REPO / "examples"))  # as pyflyte run puts it: image_spec is imported by name
    number = int(value) if value.isdigit() else None
    expected = {
        "training_workflow": value if number is None else number,
        "flyte2_training": value if number is None else number,
        "soft_restart": value if number is None else f"{number}:{number}",
    }
    for name, nnodes in expected.items():
        assert 'os.environ.get("EXAMPLE_NNODES"' in (REPO / "examples" / f"{name}.py").read_text(), name
        monkeypatch.delitem(sys.modules, f"examples.{name}", raising=False)
        example = importlib.import_module(f"examples.{name}")
        assert (example.NNODES, type(example.NNODES)) == (nnodes, type(nnodes)), name
