"""``rootcause_harness/flyte2/training.py``: every task a pod can load by module and name, the job shape and
config its name promises (this plugin's or upstream ``Elastic``), and what each hands the training loops."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flyte._task import TaskTemplate
from flyte.errors import NonRecoverableError
from flyteplugins.pytorch import Elastic

from flyteplugins.rootcause import ElasticRootCause, StragglerCheck
from rootcause_harness.faults import INJECTED_MESSAGE
from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.job import container_args
from rootcause_harness.training_loop import COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S, SHORT_COLLECTIVE_TIMEOUT_S

TASKS = {name: value for name, value in vars(training).items() if isinstance(value, TaskTemplate)}


def test_the_module_has_its_tasks() -> None:
    assert {"train_2x2", "train_2x2_elastic", "soft_train_2x2", "train_2x1_checked"} <= set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_task_is_loaded_by_a_pod_from_this_module_under_its_own_name(name: str) -> None:
    args = container_args(TASKS[name], {})
    assert args[-4:] == ["mod", "rootcause_harness.flyte2.training", "instance", name]
    upstream = "elastic" in name
    assert args[0] == ("a0" if upstream else "rootcause-a0")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_tasks_config_is_the_shape_and_plugin_its_name_says(name: str) -> None:
    config = TASKS[name].plugin_config
    nnodes, nproc = (int(n) for n in re.search(r"_(\d)x(\d)", name).groups())  # type: ignore[union-attr]
    if "elastic" in name:
        assert type(config) is Elastic
    else:
        assert isinstance(config, ElasticRootCause)
    assert config.nproc_per_node == nproc
    if name.startswith("soft_"):
        assert (config.nnodes, config.restart_policy, config.max_restarts) == (f"1:{nnodes}", "soft", 2)
    else:
        assert config.nnodes == nnodes
        assert config.max_restarts == (3 if name.endswith("_restarting") else 0)


def test_only_the_checked_task_runs_the_straggler_check_and_the_report_tasks_report() -> None:
    checked = [name for name, task in TASKS.items() if getattr(task.plugin_config, "straggler_check", None)]
    assert checked == ["train_2x1_checked"]
    assert TASKS["train_2x1_checked"].plugin_config.straggler_check == StragglerCheck()
    assert sorted(name for name, task in TASKS.items() if task.report) == ["train_2x1", "train_2x1_checked"]


@pytest.fixture
def training_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """``run_training`` as the tasks call it, recorded instead of run."""
    calls: list[tuple[Any, ...]] = []

    def run_training(*args: Any) -> float:
        calls.append(args)
        return 0.5

    monkeypatch.setattr(training, "run_training", run_training)
    return calls


def test_each_task_runs_the_loop_with_its_collective_timeout(training_calls: list[tuple[Any, ...]]) -> None:
    for name, task in TASKS.items():
        if name.startswith("soft_"):
            continue
        assert task.func(steps=3) == 0.5
        expected: tuple[Any, ...] = (3,)
        if "short_timeout" in name:
            expected = (3, SHORT_COLLECTIVE_TIMEOUT_S)
        elif "long_timeout" in name:
            expected = (3, LONG_COLLECTIVE_TIMEOUT_S, LONG_COLLECTIVE_TIMEOUT_S)
        assert training_calls.pop() == expected, name
    assert SHORT_COLLECTIVE_TIMEOUT_S < COLLECTIVE_TIMEOUT_S < LONG_COLLECTIVE_TIMEOUT_S


def test_the_no_retry_task_makes_its_own_injected_failure_non_recoverable(monkeypatch: pytest.MonkeyPatch) -> None:
    def injected(steps: int) -> float:
        raise RuntimeError(f"{INJECTED_MESSAGE} on p local rank 0 at step 3")

    monkeypatch.setattr(training, "run_training", injected)
    with pytest.raises(NonRecoverableError, match="bad data, retrying cannot help: injected failure") as raised:
        training.train_2x1_no_retry.func(steps=4)
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_the_no_retry_task_leaves_a_peers_failure_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    peer = RuntimeError("Connection closed by peer")

    def victim(steps: int) -> float:
        raise peer

    monkeypatch.setattr(training, "run_training", victim)
    with pytest.raises(RuntimeError) as raised:
        training.train_2x1_no_retry.func(steps=4)
    assert raised.value is peer


def test_the_soft_task_fails_its_second_pod_with_flyte_2s_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(training, "run_soft_training", lambda *a, **k: calls.append((a, k)) or 2.0)
    assert training.soft_train_2x2.func() == 2.0
    [(args, kwargs)] = calls
    assert args == (training.SOFT_STEPS, 0.0, 0.15, "train-worker-1", 0, training.SOFT_FAIL_STEP, False)
    assert kwargs == {"init_until_scale_down": True, "finish_after_scale_up": True,
                      "recoverable_error": RuntimeError, "fatal_error": NonRecoverableError}
