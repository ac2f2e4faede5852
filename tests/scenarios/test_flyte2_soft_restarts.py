"""Soft restarts on Flyte 2: a real ``a0`` job (2 pods x 2 spawned workers, local folders) whose
worker fails with a plain exception, which Flyte 2 would retry, so the job heals it in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.job import JobSpec, run_job
from rootcause_harness.soft_training_loop import assert_every_step_once, changes_of, read_worker_logs, steps_of
from tests.scenarios.succeeded_jobs import assert_no_pod_wrote_an_error

pytestmark = pytest.mark.slow

EXPECTED = training.SOFT_STEPS * (training.SOFT_STEPS + 1) / 2  # each step adds the mean of (step + 1)


def test_survivors_keep_their_processes_while_the_failed_pod_restarts_and_the_action_succeeds(tmp_path: Path) -> None:
    spec = JobSpec(task=training.soft_train_2x2, nnodes=2, nproc_per_node=2, root=tmp_path / "bucket", timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out, logs
    assert all(pod.returncode == 0 for pod in result.pods), logs
    assert_no_pod_wrote_an_error(result)
    assert result.output == pytest.approx(EXPECTED), logs
    workers = read_worker_logs(result.sim_dir)
    assert len(workers) == 4, logs
    for (pod, local_rank), processes in workers.items():
        if pod == training.SOFT_FAILING_POD:
            # the failed pod's workers all restarted, and resumed from the survivors' step
            assert len(processes) == 2, (pod, local_rank, logs)
            first, restarted = processes
            assert steps_of(first) == list(range(1, training.SOFT_FAIL_STEP + 1)), logs
            assert steps_of(restarted)[0] > training.SOFT_FAIL_STEP + 1, logs
            assert steps_of(restarted)[-1] == training.SOFT_STEPS, logs
        else:
            # a survivor: one process, every step once and in order, through a scale-down and a scale-up
            assert len(processes) == 1, (pod, local_rank, logs)
            assert_every_step_once(processes[0], training.SOFT_STEPS)
            assert changes_of(processes[0]) == [None, "SCALE_DOWN", "SCALE_UP"], logs
            sizes = [e["world_size"] for e in processes[0] if e["event"] == "world"]
            assert sizes == [4, 2, 4], logs
