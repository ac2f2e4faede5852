"""What the console shows at the training operator's decision (the first reported pod exit), per flavour.

The operator marks an elastic PyTorchJob Succeeded when one pod exits 0 and Failed when one exits
non-zero; Flyte reads the error documents only on Succeeded, then. These jobs are judged there
(``rootcause_harness.operator``), not after the last pod exited: a culprit's pod, a victim's pod
and a pod stopped by its kubelet (SIGTERM, then SIGKILL after the grace period) each race to exit first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rootcause_harness.faults import (
    AT_POD_START,
    BEFORE_INIT,
    IN_RENDEZVOUS,
    NOT_STORE_HOST_POD,
    STORE_HOST_POD,
    Fault,
    FaultKind,
)
from rootcause_harness.flyte2 import training as flyte2_training
from rootcause_harness.flyte2.console import console_at_decision as flyte2_console
from rootcause_harness.flyte2.job import JobSpec as Flyte2JobSpec
from rootcause_harness.flyte2.job import run_job as run_flyte2_job
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.operator import ConsoleView, JobPhase
from tests.elastic_tasks.forked_training import forked_train_2x1, forked_train_2x2

pytestmark = pytest.mark.slow

#: The kubelet's grace period in these jobs: long enough for the plugin, short enough that a pod
#: that ignored its SIGTERM is killed (and fails the job) well within the test.
GRACE_S = 20.0


def _flytekit_job(tmp_path: Path, fault: Fault, task=forked_train_2x1, nproc: int = 1,
                  delete_after_decision_s: float | None = None) -> JobResult:
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=nproc, store=StoreAccess(str(tmp_path / "store")), fault=fault,
                   termination_grace_s=GRACE_S, timeout_s=180, delete_after_decision_s=delete_after_decision_s)
    result = run_job(spec, work_dir=tmp_path / "pods")
    assert not result.timed_out, f"pod logs in {result.sim_dir}"
    return result


def _assert_names(view: ConsoleView, pod: str, logs: str) -> None:
    assert view.decision.phase == JobPhase.SUCCEEDED, (view, logs)
    assert (view.outcome, view.worker) == ("error", pod), (view, logs)


@pytest.mark.parametrize(
    ("signals", "step"), [(1, 3), (2, 3), (1, BEFORE_INIT)], ids=["sigterm", "two-sigterms", "before-init"]
)
def test_a_preempted_pod_is_the_recoverable_root_cause_at_the_decision(tmp_path: Path, signals: int,
                                                                         step: int) -> None:
    """The kubelet SIGTERMs pod 1's main process (in training, twice, or before the process group
    forms): no pod exits 0 with nothing written (kfpytorch's ``IgnoreOutputs``), every pod exits 0
    within the grace with its document, and the console names the stopped pod, recoverable."""
    fault = Fault(FaultKind.PREEMPT, pod="train-worker-1", step=step, signals=signals)
    result = _flytekit_job(tmp_path, fault)
    logs = f"pod logs in {result.sim_dir}"
    assert [pod.returncode for pod in result.pods] == [0, 0], logs  # none SIGKILLed at the grace's end
    view = console_at_decision(result, aggregation=True)
    _assert_names(view, "train-worker-1", logs)
    assert view.recoverable is True, view.message
    assert "preempted: the pod received SIGTERM from its kubelet" in view.message.splitlines()[0], view.message
    without = console_at_decision(result, aggregation=False)  # error.pb alone: the first pod to fail made it
    assert without.worker == "train-worker-1", (without, logs)


#: Seconds after the decision at which the simulator deletes the pods still running, as Flyte deletes a
#: finished PyTorchJob: a pod stopped while it started leaves its peer waiting in the rendezvous.
DELETE_AFTER_DECISION_S = 1.0


@pytest.mark.parametrize("after_s", [0.2, 2.5], ids=["in-its-imports", "loading-the-task"])
def test_a_pod_stopped_while_it_starts_is_the_recoverable_root_cause_at_the_decision(tmp_path: Path,
                                                                                      after_s: float) -> None:
    """The kubelet SIGTERMs pod 1 while it still imports flytekit and torch, or loads its task and
    inputs: its SIGTERM is noted from the entrypoint's first line, the launch ends as it starts, and
    the pod exits 0 with its own document (Python's default would end it non-zero: Failed, nothing read)."""
    fault = Fault(FaultKind.PREEMPT, pod="train-worker-1", step=AT_POD_START, sigterm_after_s=after_s)
    result = _flytekit_job(tmp_path, fault, delete_after_decision_s=DELETE_AFTER_DECISION_S)
    logs = f"pod logs in {result.sim_dir}"
    assert result.operator.pod == "train-worker-1" and result.operator.code == 0, (result.operator, logs)
    view = console_at_decision(result, aggregation=True)
    _assert_names(view, "train-worker-1", logs)
    assert view.recoverable is True, view.message
    assert "preempted: the pod received SIGTERM from its kubelet" in view.message.splitlines()[0], view.message


@pytest.mark.parametrize("pod", [STORE_HOST_POD, NOT_STORE_HOST_POD], ids=["store-host", "other-pod"])
def test_a_pod_stopped_in_its_rendezvous_is_the_recoverable_root_cause_at_the_decision(tmp_path: Path,
                                                                                      pod: str) -> None:
    """The kubelet SIGTERMs a pod while its agent is in the rendezvous (the round agreed, no worker
    started). Stopped, the store's host takes the store with it: its peer's agent fails in the middle
    of its rank assignment with a bare store error, which the engine reports as a victim's, leaving
    the console's answer to the stopped pod's document."""
    fault = Fault(FaultKind.PREEMPT, pod=pod, step=IN_RENDEZVOUS)
    result = _flytekit_job(tmp_path, fault, delete_after_decision_s=DELETE_AFTER_DECISION_S)
    logs = f"pod logs in {result.sim_dir}"
    stopped = result.injected_worker
    assert result.operator.pod == stopped and result.operator.code == 0, (result.operator, logs)
    for aggregation in (True, False):
        view = console_at_decision(result, aggregation=aggregation)
        _assert_names(view, stopped, logs)
        assert view.recoverable is True, view.message
        assert "preempted: the pod received SIGTERM" in view.message.splitlines()[0], view.message


def test_a_preempted_store_host_is_named_not_taken_for_a_lost_pod(tmp_path: Path) -> None:
    """The stopped pod hosts the rendezvous store, which ends with it: its peers lose the store, but
    the stopped pod's own document (written before it exits) is the one that names the root cause."""
    result = _flytekit_job(tmp_path, Fault(FaultKind.PREEMPT, pod=STORE_HOST_POD))
    logs = f"pod logs in {result.sim_dir}"
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    view = console_at_decision(result, aggregation=True)
    _assert_names(view, result.injected_worker, logs)
    assert view.message.startswith("[root cause]") and "preempted" in view.message.splitlines()[0], view.message


def test_a_sigterm_while_the_pod_writes_its_own_report_changes_nothing(tmp_path: Path) -> None:
    """Pod 1's rank raises; its kubelet stops the pod (twice) while it diagnoses and writes: the pod
    still writes one document, for the rank's error, and exits 0 within the grace."""
    fault = Fault(FaultKind.RAISE, pod="train-worker-1", sigterm_after_s=0.3, signals=2)
    result = _flytekit_job(tmp_path, fault)
    logs = f"pod logs in {result.sim_dir}"
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    view = console_at_decision(result, aggregation=True)
    _assert_names(view, "train-worker-1", logs)
    first_line = view.message.splitlines()[0]
    assert "injected failure" in first_line and "preempted" not in first_line, view.message
    assert view.rank == result.injected_rank, (view, logs)


def test_a_killed_rank_is_named_at_the_decision_whichever_pod_exits_first(tmp_path: Path) -> None:
    """A SIGKILLed rank's pod and its victims' pod race to exit: a victim's pod waits for the
    culprit's document before it exits, so the first document present names the culprit."""
    result = _flytekit_job(tmp_path, Fault(FaultKind.SIGKILL, pod="train-worker-1", local_rank=1),
                           task=forked_train_2x2, nproc=2)
    logs = f"pod logs in {result.sim_dir}"
    view = console_at_decision(result, aggregation=True)
    _assert_names(view, "train-worker-1", logs)
    assert view.rank == result.injected_rank, (view, logs)


def test_a_preempted_flyte_2_pod_is_the_recoverable_root_cause_at_the_decision(tmp_path: Path) -> None:
    fault = Fault(FaultKind.PREEMPT, pod="train-worker-1")
    spec = Flyte2JobSpec(task=flyte2_training.train_2x1, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket",
                         fault=fault, termination_grace_s=GRACE_S, timeout_s=180)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    view = flyte2_console(result)
    _assert_names(view, "train-worker-1", logs)
    assert view.recoverable is True, view.message
    assert "preempted" in view.message.splitlines()[0], view.message


@pytest.mark.parametrize("pod", [STORE_HOST_POD, NOT_STORE_HOST_POD], ids=["store-host", "other-pod"])
def test_a_flyte_2_pod_stopped_in_its_rendezvous_is_the_recoverable_root_cause_at_the_decision(
    tmp_path: Path, pod: str
) -> None:
    """As for flytekit: the stopped store host's peer fails with a bare store error in its rank
    assignment, before any agreement could run; its report names only a victim, so it writes the
    ``error.pb`` the stopped pod wrote (``root_cause_adoption``), not its own: Flyte 2 has one
    ``error.pb``, and the stopped pod's exit, the decision, comes seconds after its write."""
    fault = Fault(FaultKind.PREEMPT, pod=pod, step=IN_RENDEZVOUS)
    spec = Flyte2JobSpec(task=flyte2_training.train_2x1, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket",
                         fault=fault, termination_grace_s=GRACE_S, timeout_s=180,
                         delete_after_decision_s=DELETE_AFTER_DECISION_S)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    stopped = result.injected_worker
    assert result.operator.pod == stopped and result.operator.code == 0, (result.operator, logs)
    view = flyte2_console(result)
    _assert_names(view, stopped, logs)
    assert view.recoverable is True, view.message
    assert "preempted: the pod received SIGTERM from its kubelet" in view.message.splitlines()[0], view.message


@pytest.mark.parametrize("after_s", [0.2, 2.5], ids=["in-its-imports", "loading-the-task"])
def test_a_flyte_2_pod_stopped_while_it_starts_is_the_recoverable_root_cause_at_the_decision(
    tmp_path: Path, after_s: float
) -> None:
    """The kubelet SIGTERMs pod 1 while ``a0`` still imports flyte and torch, or loads the task: the
    task's container args run ``rootcause-a0``, which notes the SIGTERM from its first line, so the
    launch ends as it starts and the pod exits 0 with its ``error.pb`` (flyte's ``a0`` alone would
    exit 143: Failed, nothing read)."""
    fault = Fault(FaultKind.PREEMPT, pod="train-worker-1", step=AT_POD_START, sigterm_after_s=after_s)
    spec = Flyte2JobSpec(task=flyte2_training.train_2x1, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket",
                         fault=fault, termination_grace_s=GRACE_S, timeout_s=180,
                         delete_after_decision_s=DELETE_AFTER_DECISION_S)
    result = run_flyte2_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert result.operator.pod == "train-worker-1" and result.operator.code == 0, (result.operator, logs)
    view = flyte2_console(result)
    _assert_names(view, "train-worker-1", logs)
    assert view.recoverable is True, view.message
    assert "preempted: the pod received SIGTERM from its kubelet" in view.message.splitlines()[0], view.message
