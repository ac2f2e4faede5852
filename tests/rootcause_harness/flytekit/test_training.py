"""``rootcause_harness/flytekit/training.py``: every task a pod loads by module and name through the entrypoint
its config calls for, the job shape its name promises, and the collective timeouts it runs the loop with."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flytekit.core.base_task import PythonTask
from flytekitplugins.kfpytorch import Elastic

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_harness.flytekit import training
from rootcause_harness.flytekit.job import container_args, serialize
from rootcause_harness.training_loop import LONG_COLLECTIVE_TIMEOUT_S, SHORT_COLLECTIVE_TIMEOUT_S

TASKS = {name: value for name, value in vars(training).items() if isinstance(value, PythonTask)}


def test_the_module_has_its_tasks() -> None:
    assert {"train_2x2", "train_2x2_elastic", "train_3x1_short_timeout", "train_8x1_long_timeout"} <= set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_task_is_loaded_by_module_and_name_through_its_configs_entrypoint(name: str) -> None:
    args = container_args(serialize(TASKS[name]))
    assert args[-4:] == ["task-module", "rootcause_harness.flytekit.training", "task-name", name]
    assert args[0] == ("pyflyte-execute" if "elastic" in name else "pyflyte-rootcause-execute")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_tasks_config_is_the_shape_and_plugin_its_name_says(name: str) -> None:
    config = TASKS[name].task_config
    nnodes, nproc = (int(n) for n in re.search(r"_(\d)x(\d)", name).groups())  # type: ignore[union-attr]
    assert type(config) is (Elastic if "elastic" in name else ElasticRootCause)
    assert (config.nnodes, config.nproc_per_node, config.max_restarts) == (nnodes, nproc, 0)


def test_each_task_runs_the_loop_with_its_collective_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(training, "run_training", lambda *args: calls.append(args) or 0.25)
    for name, task in TASKS.items():
        assert task.task_function(steps=5) == 0.25
        expected: tuple[Any, ...] = (5,)
        if "short_timeout" in name:
            expected = (5, SHORT_COLLECTIVE_TIMEOUT_S)
        elif "long_timeout" in name:
            expected = (5, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)
        assert calls.pop() == expected, name


def test_importing_the_tasks_arms_no_agent_fault_outside_a_faulty_job() -> None:
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    assert SimpleElasticAgent._assign_worker_ranks.__qualname__ == "SimpleElasticAgent._assign_worker_ranks"
