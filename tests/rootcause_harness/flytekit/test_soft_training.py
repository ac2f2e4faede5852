"""``rootcause_harness/flytekit/soft_training.py``: the soft- and hard-restart tasks' configs, the arguments
each hands the loop, and the loop run for real in a world of one with flytekit's exceptions."""

from __future__ import annotations

from typing import Any

import pytest
import torch.distributed as dist
from flytekit.core.base_task import PythonTask
from flytekit.exceptions.user import FlyteRecoverableException

from rootcause_harness import soft_training_loop
from rootcause_harness.flytekit import soft_training
from rootcause_harness.flytekit.job import container_args, serialize

TASKS = {name: value for name, value in vars(soft_training).items() if isinstance(value, PythonTask)}


def test_the_loop_raises_flytekits_exceptions() -> None:
    partial = soft_training.run_soft_training
    assert partial.func is soft_training_loop.run_soft_training
    assert partial.keywords == {"recoverable_error": FlyteRecoverableException, "fatal_error": ValueError}


@pytest.mark.parametrize(("name", "nnodes", "nproc", "policy", "start_method"), [
    ("soft_train_2x2", "1:2", 2, "soft", "fork"),
    ("soft_train_2x2_spawned", "1:2", 2, "soft", "spawn"),
    ("soft_train_3x1_spawned", "2:3", 1, "soft", "spawn"),
    ("hard_train_2x2_spawned", "1:2", 2, "hard", "spawn"),
    ("hard_train_2x2", "1:2", 2, "hard", "fork"),
    ("soft_train_2x1_short_timeout", "1:2", 1, "soft", "fork"),
])
def test_each_task_is_elastic_with_its_restart_policy_and_start_method(name: str, nnodes: str, nproc: int,
                                                                       policy: str, start_method: str) -> None:
    config = TASKS[name].task_config
    assert (config.nnodes, config.nproc_per_node, config.max_restarts, config.restart_policy,
            config.start_method) == (nnodes, nproc, 2, policy, start_method)
    assert container_args(serialize(TASKS[name]))[-1] == name
    assert (config.soft_restart_timeout_s == 2.0) == name.endswith("_short_timeout")


def test_the_spawned_tasks_hand_every_argument_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(soft_training, "run_soft_training", lambda *a, **k: calls.append((a, k)) or 1.0)
    soft_training.soft_train_2x2_spawned.task_function(steps=6, init_s=0.5, step_s=0.1, fail_pod="p-1",
                                                       fail_local_rank=1, fail_step=2, fail_again=True,
                                                       init_until_scale_down=True, fail_fatal=True,
                                                       finish_after_scale_up=True, loop="rfc", fail_kind="vanish",
                                                       restart_init_s=3.0)
    soft_training.hard_train_2x2.task_function()
    assert calls == [
        ((6, 0.5, 0.1, "p-1", 1, 2, True, True, True),
         {"fail_kind": "vanish", "finish_after_scale_up": True, "loop": "rfc", "restart_init_s": 3.0}),
        ((12, 0.0, 0.05, "", 0, 4, False, False), {}),
    ]


@pytest.mark.usefixtures("world_of_one")
def test_a_failure_is_recoverable_unless_fatal() -> None:
    task = soft_training.soft_train_2x2_spawned.task_function
    assert task(steps=3, step_s=0.0) == 6.0
    with pytest.raises(FlyteRecoverableException, match="injected failure at step 1 on train-worker-0 local rank 0"):
        task(steps=3, step_s=0.0, fail_pod="train-worker-0", fail_step=1)
    dist.destroy_process_group()
    with pytest.raises(ValueError, match="injected failure at step 1 on train-worker-0 local rank 0"):
        task(steps=3, step_s=0.0, fail_pod="train-worker-0", fail_step=1, fail_fatal=True)
