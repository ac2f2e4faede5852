"""Soft restarts end to end: simulated PyTorchJobs (real pods, real torch elastic agents, gloo workers).

A worker raises a recoverable error mid-training on one pod. Under ``restart_policy="soft"`` only that
pod's workers restart; every other pod's workers keep their processes and their in-memory step,
see the world scale down and back up, and the job returns the same result as a job with no failure.
A second failure of the same pod, or one that is not recoverable, ends the job with its root cause,
named by both readers, without a restart. Under ``"hard"`` every worker restarts, as in torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from flytekit.core.base_task import PythonTask

from backend_reader import RemoteFileOutputReader
from backend_reader.upstream_rule import earliest_error
from rootcause_core.ordering import Role
from rootcause_harness.faults import NOT_STORE_HOST_POD
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.flytekit.soft_training import (
    hard_train_2x2,
    soft_train_2x1_short_timeout,
    soft_train_2x2,
    soft_train_2x2_spawned,
    soft_train_3x1_spawned,
)
from rootcause_harness.soft_training_loop import assert_every_step_once, changes_of, read_worker_logs, steps_of
from testbed.object_stores import ObjectStore
from tests.entrypoint_tasks.harness import read_outputs

STEPS = 24
#: Only a guard against a hang: a job here takes 30 to 80 s on an idle machine. At a load of 30 on 2
#: cores, a restarted pod's spawned workers took a minute to start again, and the pods' ends (their
#: workers' interpreters exit seconds after the last step) ran a job past 180 s.
JOB_LIMIT_S = 300
EXPECTED = STEPS * (STEPS + 1) / 2  # each step adds the mean of (step + 1) over the world

pytestmark = [pytest.mark.slow, pytest.mark.timeout(JOB_LIMIT_S + 60)]


def _run(store: ObjectStore, tmp_path: Path, task: PythonTask, nnodes: int, nproc: int,
         reschedule_lost_after_s: float | None = None, **inputs: Any) -> JobResult:
    spec = JobSpec(task=task, nnodes=nnodes, nproc_per_node=nproc, store=StoreAccess(store.root),
                   inputs={"steps": STEPS, "step_s": 0.15, **inputs}, timeout_s=JOB_LIMIT_S,
                   reschedule_lost_after_s=reschedule_lost_after_s)
    result = run_job(spec, work_dir=tmp_path)
    assert not result.timed_out, f"pods did not exit; logs in {result.sim_dir}"
    return result


def _output(store: ObjectStore, result: JobResult) -> float:
    return read_outputs(store, result.output_prefix).literals["o0"].scalar.primitive.float_value


@pytest.mark.parametrize(
    ("task", "nnodes", "nproc", "failing_pod", "failing_local_rank", "loop"),
    [
        (soft_train_2x2, 2, 2, "train-worker-1", 1, {}),
        # the pod whose agent hosts the stores, 3 pods, spawned workers
        (soft_train_3x1_spawned, 3, 1, "train-worker-0", 0, {"finish_after_scale_up": True}),
        # spawned workers whose loop uses the RFC's API alone (get_worker_event, get_worker_info, torch's
        # own init and destroy)
        (soft_train_2x2_spawned, 2, 2, "train-worker-1", 0, {"loop": "rfc", "finish_after_scale_up": True}),
    ],
    ids=["2x2", "3x1-spawned-first-pod", "2x2-spawned-rfc"],
)
def test_survivors_keep_their_processes_and_steps_while_the_failed_pod_restarts(
    task: PythonTask, nnodes: int, nproc: int, failing_pod: str, failing_local_rank: int, loop: dict[str, Any],
    file_store: ObjectStore, tmp_path: Path,
) -> None:
    result = _run(file_store, tmp_path, task, nnodes, nproc, fail_pod=failing_pod,
                  fail_local_rank=failing_local_rank, fail_step=4, init_until_scale_down=True, **loop)
    logs = f"pod logs in {result.sim_dir}"
    assert _output(file_store, result) == pytest.approx(EXPECTED), logs
    workers = read_worker_logs(result.sim_dir)
    assert len(workers) == nnodes * nproc, logs
    for (pod, local_rank), processes in workers.items():
        if pod == failing_pod:
            # the failed pod's workers all restarted (soft-no-replace: the node restarts as a whole) ...
            assert len(processes) == 2, (pod, local_rank, logs)
            first, restarted = processes
            assert steps_of(first) == [1, 2, 3, 4], logs
            # ... and resumed from the survivors' step, never from step 0
            assert steps_of(restarted)[0] > 5 and steps_of(restarted)[-1] == STEPS, logs
        else:
            # a survivor: one process, every step once and in order, through a scale-down and a scale-up
            assert len(processes) == 1, (pod, local_rank, logs)
            assert_every_step_once(processes[0], STEPS)
            assert changes_of(processes[0]) == [None, "SCALE_DOWN", "SCALE_UP"], logs
            sizes = [e["world_size"] for e in processes[0] if e["event"] == "world"]
            assert sizes == [nnodes * nproc, (nnodes - 1) * nproc, nnodes * nproc], logs
    assert all(pod.returncode == 0 for pod in result.pods), logs
    assert not RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_all().failures, logs


@pytest.mark.parametrize(("task", "nnodes", "nproc"), [(soft_train_2x2_spawned, 2, 2), (soft_train_3x1_spawned, 3, 1)],
                         ids=["2x2-spawned", "3x1-spawned"])
def test_a_job_whose_training_ends_while_the_failed_pod_restarts_succeeds(
    task: PythonTask, nnodes: int, nproc: int, file_store: ObjectStore, tmp_path: Path
) -> None:
    """Spawned workers (kfpytorch's default). The restarted pod's workers load their model for 120 s,
    so the survivors finish the last 20 steps first however busy the machine is (with a few seconds, a
    busy runner can let the restarted pod rejoin in time: another scenario). The test does not wait
    the 120 s: the restarted pod stops its loading workers once the training finished. It
    succeeds without claiming the task's output (torch's agent once refused its run with
    "ValueError: Unknown worker"); the survivors' rank 0 returns the result."""
    result = _run(file_store, tmp_path, task, nnodes, nproc, fail_pod="train-worker-1",
                  fail_local_rank=nproc - 1, fail_step=4, restart_init_s=120.0)
    logs = f"pod logs in {result.sim_dir}"
    assert all(pod.returncode == 0 for pod in result.pods), logs
    assert _output(file_store, result) == pytest.approx(EXPECTED), logs
    workers = read_worker_logs(result.sim_dir)
    assert {pod for pod, _ in workers} == {f"train-worker-{index}" for index in range(nnodes)}, logs
    for (pod, _), processes in workers.items():
        if pod != "train-worker-1":  # survivors: one process each, every step once, to the end
            assert len(processes) == 1, logs
            assert_every_step_once(processes[0], STEPS)
    restarted_log = next(pod.log_path for pod in result.pods if pod.name == "train-worker-1").read_text()
    assert "the training finished while this node restarted" in restarted_log, logs  # its pod log says why
    assert not RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_all().failures, logs


@pytest.mark.parametrize(("kind", "loop"), [("vanish", "rfc"), ("freeze", "helpers")], ids=["vanish-rfc", "freeze"])
def test_survivors_of_a_lost_pod_go_on_without_it_in_their_own_processes(
    kind: str, loop: str, file_store: ObjectStore, tmp_path: Path
) -> None:
    """3 pods x 1 spawned worker, ``nnodes="2:3"``: a pod that does not host the store is lost at step
    4, every process of it SIGKILLed (its peers' all-reduce raises at once) or SIGSTOPped (a frozen
    node: its sockets stay open and the all-reduce just waits). The peer watch declares it lost, the
    survivors scale down to 2 pods (a frozen peer's collective is left at the agent's PAUSED) and
    finish, each in its one process, every step once; the vanished pod is found by its watcher's link at
    once, the frozen one by its silence. The vanish runs the loop written against the
    RFC's API alone (``get_worker_event``, ``get_worker_info``, torch's own init and destroy)."""
    result = _run(file_store, tmp_path, soft_train_3x1_spawned, 3, 1, fail_pod=NOT_STORE_HOST_POD,
                  fail_local_rank=0, fail_step=4, fail_kind=kind, loop=loop)
    logs = f"pod logs in {result.sim_dir}"
    lost = result.injected_worker
    survivors = [pod for pod in result.pods if pod.name != lost]
    assert lost is not None and len(survivors) == 2, logs
    assert all(pod.returncode == 0 for pod in survivors), logs
    assert _output(file_store, result) == pytest.approx(EXPECTED), logs
    workers = read_worker_logs(result.sim_dir)
    for pod in survivors:
        (process,) = workers[(pod.name, 0)]
        assert_every_step_once(process, STEPS)
        assert changes_of(process) == [None, "SCALE_DOWN"], logs
        assert [e["world_size"] for e in process if e["event"] == "world"] == [3, 2], logs
    # a vanished pod's watcher reads its link close, without waiting out the silence limit; a frozen
    # pod closes nothing
    by_link = [pod.name for pod in survivors if "process ended without a word" in pod.log_path.read_text()]
    assert len(by_link) == (1 if kind == "vanish" else 0), logs
    assert not RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_all().failures, logs


def test_a_second_failure_of_the_same_pod_ends_the_job_with_its_root_cause(file_store: ObjectStore,
                                                                           tmp_path: Path) -> None:
    result = _run(file_store, tmp_path, soft_train_2x2, 2, 2, fail_pod="train-worker-1", fail_local_rank=1,
                  fail_step=4, fail_again=True)
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=2, settle_timeout=10).read_all()
    root = read.failures[0]
    assert (root.worker, root.global_rank, root.role) == ("train-worker-1", 3, Role.CANDIDATE), logs
    assert "injected failure at step" in root.message, logs
    assert "Soft restarts before this failure" in root.message and "train-worker-1 failed; its workers restarted" in (
        root.message), logs
    assert all(f.role == Role.VICTIM for f in read.failures if f.worker == "train-worker-0"), logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == "train-worker-1", f"Go rule: {console}; {logs}"
    survivors = read_worker_logs(result.sim_dir)[("train-worker-0", 0)]
    assert len(survivors) == 1, logs  # pod 0 was never restarted: ended once, at the end


def test_a_failure_that_is_not_recoverable_is_not_restarted_and_ends_the_job_with_its_root_cause(
    file_store: ObjectStore, tmp_path: Path,
) -> None:
    result = _run(file_store, tmp_path, soft_train_2x2, 2, 2, fail_pod="train-worker-1", fail_local_rank=1,
                  fail_step=4, fail_fatal=True)
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=2, settle_timeout=10).read_all()
    assert {f.worker for f in read.failures} == {"train-worker-0", "train-worker-1"}, logs
    root = read.failures[0]
    assert (root.worker, root.global_rank, root.role) == ("train-worker-1", 3, Role.CANDIDATE), logs
    assert "ValueError: injected failure at step 4" in root.message, logs
    assert all(f.role == Role.VICTIM for f in read.failures if f.worker == "train-worker-0"), logs
    console = earliest_error(result.output_prefix, result.spec.store.filesystem())
    assert console is not None and console.worker == "train-worker-1", f"Go rule: {console}; {logs}"
    # nobody restarted: not the failed node (not recoverable), not its peers (the job ended)
    assert all(len(processes) == 1 for processes in read_worker_logs(result.sim_dir).values()), logs


def test_the_hard_policy_restarts_every_worker_as_torch_does(file_store: ObjectStore, tmp_path: Path) -> None:
    """torch 2.13's shared rendezvous store keeps each restart's worker keys under /worker/attempt_<n>,
    and pods that restart at different moments read each other's stale keys: restarted workers then
    never finish init_process_group (plain kfpytorch Elastic too). A hard policy that restarts gives
    the workers a store of their own (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, set by the plugin)."""
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in os.environ
    result = _run(file_store, tmp_path, hard_train_2x2, 2, 2, fail_pod="train-worker-1", fail_local_rank=1,
                  fail_step=4)
    logs = f"pod logs in {result.sim_dir}"
    assert _output(file_store, result) == pytest.approx(EXPECTED), logs
    for (pod, local_rank), processes in read_worker_logs(result.sim_dir).items():
        assert len(processes) == 2, (pod, local_rank, logs)  # every worker of every pod restarted ...
        assert steps_of(processes[1])[0] == 1, logs  # ... from step 0 (no checkpoint in this loop)


def test_a_restarted_node_that_never_gets_ready_ends_the_job_instead_of_hanging_it(file_store: ObjectStore,
                                                                                   tmp_path: Path) -> None:
    """The restarted worker's initialisation (5 s) outlasts ``soft_restart_timeout_s`` (2 s): the job
    ends, every pod reports, and the reports say why."""
    result = _run(file_store, tmp_path, soft_train_2x1_short_timeout, 2, 1, fail_pod="train-worker-1",
                  fail_step=4, init_s=5.0, steps=400, step_s=0.05)
    logs = f"pod logs in {result.sim_dir}"
    read = RemoteFileOutputReader(result.output_prefix, expected_workers=2, settle_timeout=10).read_all()
    assert {f.worker for f in read.failures} == {"train-worker-0", "train-worker-1"}, logs
    reports = "\n".join(f.message for f in read.failures)
    assert "restarted workers were not ready within 2 s" in reports, logs


@pytest.mark.parametrize(("task", "nnodes", "nproc"), [(soft_train_3x1_spawned, 3, 1), (soft_train_2x2_spawned, 2, 2)],
                         ids=["3x1", "2x2"])
def test_a_pod_rescheduled_after_its_node_was_lost_joins_the_running_job(
    task: PythonTask, nnodes: int, nproc: int, file_store: ObjectStore, tmp_path: Path
) -> None:
    """Spawned workers, ``nnodes`` up to the pod count: a pod that does not host the store vanishes at
    step 4 and the survivors scale down. As the training operator would, the simulator creates the
    pod again under its name 1 s later: torch's rendezvous round is closed, so the new pod joins the
    running job instead (a new node, once the lost one is out: the job is at its maximum), and the
    survivors scale up at a step boundary. Survivors keep their processes and every step; the
    joined workers start from the survivors' step."""
    result = _run(file_store, tmp_path, task, nnodes, nproc, reschedule_lost_after_s=1.0,
                  fail_pod=NOT_STORE_HOST_POD, fail_local_rank=0, fail_step=4, fail_kind="vanish",
                  finish_after_scale_up=True)
    logs = f"pod logs in {result.sim_dir}"
    lost = result.injected_worker
    assert [pod.name for pod in result.replaced] == [lost], logs
    assert all(pod.returncode == 0 for pod in result.pods), logs  # the rescheduled pod too
    assert _output(file_store, result) == pytest.approx(EXPECTED), logs
    workers = read_worker_logs(result.sim_dir)
    for pod in result.pods:
        for local_rank in range(nproc):
            if pod.name == lost:
                first, joined = workers[(pod.name, local_rank)]
                assert steps_of(first)[-1] <= 5, logs  # a peer may still finish step 5 as the pod goes
                assert steps_of(joined)[0] > 5 and steps_of(joined)[-1] == STEPS, logs
                continue
            (process,) = workers[(pod.name, local_rank)]
            assert_every_step_once(process, STEPS)
            assert changes_of(process) == [None, "SCALE_DOWN", "SCALE_UP"], logs
            sizes = [e["world_size"] for e in process if e["event"] == "world"]
            assert sizes == [nnodes * nproc, (nnodes - 1) * nproc, nnodes * nproc], logs
    assert not RemoteFileOutputReader(result.output_prefix, settle_timeout=0).read_all().failures, logs


def test_a_preempted_pod_is_the_recoverable_root_cause_and_its_peers_scale_down(file_store: ObjectStore,
                                                                                tmp_path: Path) -> None:
    """3 pods x 1 spawned worker, ``nnodes="2:3"``: the kubelet stops a pod that does not host the
    store (SIGTERM) at step 4. The training operator ends the job at the first pod exit whatever it
    is (Flyte's ``RestartPolicy: Never``), so the stopped pod writes itself as the recoverable root
    cause and exits 0: Flyte retries the task. Until then its peers scale down as for a lost pod,
    each in its own process, and train on (for 8 s more: the stopped pod, whose own store connection
    went with its agent, takes some 5 s to give up agreeing and exit, under load more; in a real job
    the others train for hours)."""
    steps = 60
    result = _run(file_store, tmp_path, soft_train_3x1_spawned, 3, 1, fail_pod=NOT_STORE_HOST_POD,
                  fail_local_rank=0, fail_step=4, fail_kind="preempt", steps=steps)
    logs = f"pod logs in {result.sim_dir}"
    workers = read_worker_logs(result.sim_dir)
    (stopped,) = {pod for (pod, _), processes in workers.items()
                  for process in processes if any(e["event"] == "fault" for e in process)}
    assert all(pod.returncode == 0 for pod in result.pods), logs
    assert result.operator.pod == stopped and result.operator.code == 0, (result.operator, logs)
    view = console_at_decision(result, aggregation=True)
    assert (view.outcome, view.worker, view.recoverable) == ("error", stopped, True), (view, logs)
    assert "preempted: the pod received SIGTERM from its kubelet" in view.message.splitlines()[0], view.message
    for (pod, _), processes in workers.items():
        if pod != stopped:
            (process,) = processes  # a survivor keeps its process
            assert changes_of(process) == [None, "SCALE_DOWN"], logs
            assert_every_step_once(process, steps)
