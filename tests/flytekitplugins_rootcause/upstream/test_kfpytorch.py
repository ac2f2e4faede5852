"""``flytekitplugins_rootcause.upstream.kfpytorch``: the swap of what kfpytorch's elastic task ships to its workers,
for one launch only, and its refusal on a kfpytorch without the names it needs (a real kfpytorch task, no launch)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flytekit import task
from flytekitplugins.kfpytorch import Elastic
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from flytekitplugins_rootcause.upstream.kfpytorch import SYMBOLS, task_function_swapped
from rootcause_engine.upstream import versions
from rootcause_engine.upstream.versions import UnsupportedUpstreamError, symbol_problem


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    """Each test checks kfpytorch anew, and a simulated kfpytorch never leaks into another test's check."""
    versions.forget_checks()
    yield
    versions.forget_checks()


def train(epochs: int) -> float:
    return float(epochs)


def check_instead(epochs: int) -> float:
    return -1.0


def _elastic_task() -> PytorchElasticFunctionTask:
    return task(task_config=Elastic(nnodes=1, nproc_per_node=1))(train)  # type: ignore[return-value]


def test_the_seam_declares_kfpytorch_s_launch_and_the_function_it_ships_and_both_are_there() -> None:
    assert [symbol.qualified_name for symbol in SYMBOLS] == [
        "flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._execute",
        "flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._task_function",
    ]
    assert {symbol.distribution for symbol in SYMBOLS} == {"flytekitplugins-kfpytorch"}
    assert [symbol_problem(symbol) for symbol in SYMBOLS] == [None, None]


def test_the_launch_ships_the_swapped_function_and_the_task_s_own_comes_back() -> None:
    elastic = _elastic_task()
    with task_function_swapped(elastic, check_instead):
        assert elastic.task_function is check_instead and elastic.task_function(epochs=2) == -1.0
    assert elastic.task_function is train and vars(elastic)["_task_function"] is train
    assert elastic.name.endswith("train")  # the task itself is what flytekit registered


def test_the_task_s_own_function_comes_back_when_the_launch_raises() -> None:
    elastic = _elastic_task()
    with pytest.raises(ZeroDivisionError), task_function_swapped(elastic, check_instead):
        raise ZeroDivisionError("the launch failed")
    assert elastic.task_function is train


def test_swaps_are_per_task_instance() -> None:
    first, second = _elastic_task(), _elastic_task()
    with task_function_swapped(first, check_instead):
        assert second.task_function is train
    assert first.task_function is train


def test_a_kfpytorch_without_its_launch_is_refused_before_anything_is_swapped(monkeypatch: pytest.MonkeyPatch) -> None:
    elastic = _elastic_task()
    monkeypatch.delattr(PytorchElasticFunctionTask, "_execute")
    with pytest.raises(UnsupportedUpstreamError, match=r"has no flytekitplugins\.kfpytorch\.task\."
                                                       r"PytorchElasticFunctionTask\._execute, which the plugin "
                                                       r"extends"), task_function_swapped(elastic, check_instead):
        pytest.fail("the block ran on a kfpytorch without its launch")
    assert elastic.task_function is train
