"""The plugin never fails a training plain ``Elastic`` would run (issue 49, "fail open"), in real
2-pod jobs whose pods see another upstream than the installed one, in their own processes
(``rootcause_harness.faults.upstream_skew_env``: a fake ``dist-info``, a deleted internal, a class
whose patching raises; nothing of the test process is patched):

- a newer torch than verified: the diagnosis runs, with the warning in the pod log and the error;
- a missing internal: the pods run upstream's launch, the log says the diagnosis is off and why;
- a patch that raises while applied: the same, the log naming the error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rootcause_engine.upstream.versions import VERIFIED
from rootcause_harness.faults import Fault, FaultKind, upstream_skew_env
from rootcause_harness.flyte2 import training as flyte2_training
from rootcause_harness.flyte2.console import console_at_decision as flyte2_console
from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, run_job
from rootcause_harness.operator import JobPhase
from tests.elastic_tasks import slow_rank_0_outputs
from tests.elastic_tasks.forked_training import forked_train_2x1, forked_train_2x2

pytestmark = pytest.mark.slow

NEWER_TORCH = "2.99.0"
NOT_VERIFIED = f"root-cause diagnosis not verified on torch {NEWER_TORCH} (verified: torch{VERIFIED['torch']})"
MISSING = "torch._C._distributed_c10d._dump_fr_trace"
AGENT_CLASS = "torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent"
OFF = "root-cause diagnosis is off: "
AS_UPSTREAM = "; running as upstream Elastic"


def _skew(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **skew: object) -> None:
    """Every pod of the next job starts with this upstream (pods inherit the test's environment)."""
    env = upstream_skew_env(tmp_path / "upstream", pythonpath=os.environ.get("PYTHONPATH", ""),
                            **skew)  # type: ignore[arg-type]
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _logs(sim_dir: Path) -> str:
    return "\n".join(path.read_text(errors="replace") for path in sorted(sim_dir.glob("*.log")))


def _flytekit_job(tmp_path: Path, task=forked_train_2x1, nproc: int = 1, fault: Fault | None = None):
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=nproc, store=StoreAccess(str(tmp_path / "store")),
                   fault=fault, timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    assert not result.timed_out, f"pod logs in {result.sim_dir}"
    return result, _logs(result.sim_dir)


def test_flytekit_newer_torch_trains_with_the_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, versions={"torch": NEWER_TORCH})
    result, logs = _flytekit_job(tmp_path)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert console_at_decision(result).outcome == "success", logs
    assert NOT_VERIFIED in logs and OFF not in logs


def test_flytekit_newer_torch_names_the_killed_rank_at_the_decision(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, versions={"torch": NEWER_TORCH})
    fault = Fault(FaultKind.SIGKILL, pod="train-worker-1", local_rank=1)
    result, logs = _flytekit_job(tmp_path, forked_train_2x2, 2, fault)
    view = console_at_decision(result, aggregation=True)
    assert view.decision.phase == JobPhase.SUCCEEDED, (view, logs)
    assert (view.outcome, view.worker, view.rank) == ("error", "train-worker-1", result.injected_rank), (view, logs)
    assert NOT_VERIFIED in view.message, view.message  # in the error the user reads


def test_flytekit_missing_internal_trains_as_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, removed=(MISSING,))
    result, logs = _flytekit_job(tmp_path)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert console_at_decision(result).outcome == "success", logs
    assert f"{OFF}torch " in logs and f"has no {MISSING}" in logs and AS_UPSTREAM in logs, logs
    assert "LaunchSession" not in logs and "Root cause of the elastic launch failure" not in logs


def test_flytekit_missing_internal_fails_as_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker raises: kfpytorch's own error, not a root-cause report (what plain ``Elastic`` gives)."""
    _skew(monkeypatch, tmp_path, removed=(MISSING,))
    result, logs = _flytekit_job(tmp_path, forked_train_2x2, 2, Fault(FaultKind.RAISE, pod="train-worker-1"))
    view = console_at_decision(result, aggregation=True)
    assert view.outcome != "success", (view, logs)
    assert "[root cause]" not in view.message and "Root cause of the elastic launch failure" not in logs, logs
    assert f"has no {MISSING}" in logs and AS_UPSTREAM in logs, logs


def test_flytekit_patch_that_raises_falls_back_to_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, frozen=(AGENT_CLASS,))
    result, logs = _flytekit_job(tmp_path)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert console_at_decision(result).outcome == "success", logs
    assert f"{OFF}applying a patch raised TypeError: LocalElasticAgent is frozen here" in logs, logs
    assert AS_UPSTREAM in logs


def test_flytekit_pod_without_rank_0_running_as_upstream_waits_for_rank_0_s_outputs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Upstream's pod without rank 0 exits 0 at once, before rank 0's pod wrote ``outputs.pb`` (here
    5 s later), and the operator's decision at that exit finds no outputs; the fallback keeps the
    plugin's wait (kfpytorch's public ``IgnoreOutputs`` and the object store, no torch internal)."""
    _skew(monkeypatch, tmp_path, frozen=(AGENT_CLASS,))
    result, logs = _flytekit_job(tmp_path, slow_rank_0_outputs.each_rank_returns_its_own)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert AS_UPSTREAM in logs, logs
    rank_0_pod, _ = result.placement[0]
    (waiting,) = [pod for pod in result.pods if pod.name != rank_0_pod]
    written_ns = Path(result.output_prefix, "outputs.pb").stat().st_mtime_ns
    assert written_ns <= waiting.exited_ns, logs
    assert console_at_decision(result).outcome == "success", logs


def _flyte2_job(tmp_path: Path, task, nproc: int, fault: Fault | None = None):
    spec = Flyte2JobSpec(task=task, nnodes=2, nproc_per_node=nproc, root=tmp_path / "bucket", fault=fault,
                         timeout_s=180)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    assert not result.timed_out, f"pod logs in {result.sim_dir}"
    return result, _logs(result.sim_dir)


#: What upstream's zombie watchdog logs when it ends a pod whose worker already exited (flyteplugins-pytorch's
#: own race: plain ``Elastic`` loses a healthy job's outputs to it now and then, and so does a pod whose
#: diagnosis is off, which runs exactly upstream's launch)
UPSTREAM_ZOMBIE_EXIT = "Zombie watchdog"


def _trained_as_upstream(result, logs: str) -> bool:
    """Upstream's launch ran the training: rank 0's pod wrote the outputs, or upstream's own watchdog
    ended it first, as it does without the plugin."""
    return result.output is not None or UPSTREAM_ZOMBIE_EXIT in logs


def test_flyte_2_newer_torch_names_the_killed_rank_at_the_decision(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, versions={"torch": NEWER_TORCH})
    fault = Fault(FaultKind.SIGKILL, pod="train-worker-1", local_rank=1)
    result, logs = _flyte2_job(tmp_path, flyte2_training.train_2x2, 2, fault)
    view = flyte2_console(result)
    assert view.decision.phase == JobPhase.SUCCEEDED, (view, logs)
    assert (view.outcome, view.worker) == ("error", "train-worker-1"), (view, logs)
    assert NOT_VERIFIED in view.message, view.message


def test_flyte_2_newer_torch_trains_with_the_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, versions={"torch": NEWER_TORCH})
    result, logs = _flyte2_job(tmp_path, flyte2_training.train_2x1, 1)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert result.output is not None and result.error_pb == "missing", logs
    assert NOT_VERIFIED in logs


def test_flyte_2_missing_internal_trains_as_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Upstream's launch trains and rank 0's pod writes the outputs (upstream's own pod without rank 0
    then writes its ``DataValidationError``, as plain ``Elastic`` does)."""
    _skew(monkeypatch, tmp_path, removed=(MISSING,))
    result, logs = _flyte2_job(tmp_path, flyte2_training.train_2x1, 1)
    assert _trained_as_upstream(result, logs), logs
    assert f"{OFF}torch " in logs and f"has no {MISSING}" in logs and AS_UPSTREAM in logs, logs


def test_flyte_2_missing_internal_fails_as_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, removed=(MISSING,))
    result, logs = _flyte2_job(tmp_path, flyte2_training.train_2x1, 1, Fault(FaultKind.RAISE, pod="train-worker-1"))
    assert result.output is None, logs
    document = result.error_document
    message = document.error.message if document is not None else ""
    assert "[root cause]" not in message, message
    assert f"has no {MISSING}" in logs and AS_UPSTREAM in logs, logs


def test_flyte_2_patch_that_raises_falls_back_to_upstream(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _skew(monkeypatch, tmp_path, frozen=(AGENT_CLASS,))
    result, logs = _flyte2_job(tmp_path, flyte2_training.train_2x1, 1)
    assert _trained_as_upstream(result, logs), logs
    assert f"{OFF}applying a patch raised TypeError: LocalElasticAgent is frozen here" in logs, logs
    assert AS_UPSTREAM in logs
