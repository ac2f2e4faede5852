"""``rootcause_harness/flytekit/chaos_training.py``: the chaos soak's hard-restart tasks (3 and 4 pods, one
spare restart), what they hand the loop, and a real run of one in a world of one."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch.distributed as dist
from flytekit.exceptions.user import FlyteRecoverableException

from rootcause_harness.chaos import REUSE_PIDS_VARIABLE
from rootcause_harness.flytekit import chaos_training
from rootcause_harness.flytekit.job import container_args, serialize


@pytest.mark.parametrize(("task", "nnodes"), [(chaos_training.chaos_train_3x1, 3), (chaos_training.chaos_train_4x1, 4)])
def test_each_task_is_a_hard_restart_job_with_a_spare_restart(task: Any, nnodes: int) -> None:
    config = task.task_config
    assert (config.nnodes, config.nproc_per_node, config.max_restarts, config.restart_policy) == (nnodes, 1, 2, "hard")
    assert container_args(serialize(task))[-4:] == ["task-module", "rootcause_harness.flytekit.chaos_training",
                                                    "task-name", task.name.rsplit(".", 1)[-1]]


def test_worker_0_of_the_named_pod_fails_once_at_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(chaos_training, "run_soft_training", lambda *args: calls.append(args) or 1.0)
    chaos_training.chaos_train_4x1.task_function(steps=9, step_s=0.2, fail_pod="train-worker-2", fail_step=6)
    chaos_training.chaos_train_3x1.task_function()
    assert calls == [(9, 0.0, 0.2, "train-worker-2", 0, 6, False), (12, 0.0, 0.05, "", 0, 4, False)]


def test_importing_outside_a_soak_pod_leaves_torchs_agent_alone() -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    assert REUSE_PIDS_VARIABLE not in os.environ
    assert LocalElasticAgent._start_workers.__qualname__ == "LocalElasticAgent._start_workers"


@pytest.mark.usefixtures("world_of_one")
def test_a_run_trains_and_the_named_pods_worker_fails_recoverably(monkeypatch: pytest.MonkeyPatch) -> None:
    task = chaos_training.chaos_train_3x1.task_function
    assert task(steps=4, step_s=0.0) == 10.0
    with pytest.raises(FlyteRecoverableException, match="at step 2 on train-worker-0 local rank 0"):
        task(steps=4, step_s=0.0, fail_pod="train-worker-0", fail_step=2)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # the restart does not fail again
    dist.destroy_process_group()
    assert task(steps=4, step_s=0.0, fail_pod="train-worker-0", fail_step=2) == 10.0
