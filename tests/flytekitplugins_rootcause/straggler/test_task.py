"""``flytekitplugins_rootcause.straggler.task``: the ``StragglerPrecheck`` config it refuses, the task it builds,
and what its ``_execute`` hands kfpytorch's launch or returns instead (kfpytorch's launch stood in for; no job)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from flytekit import task
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from flytekitplugins_rootcause.config import DEFAULT_MONITOR_INTERVAL_S
from flytekitplugins_rootcause.straggler import task as precheck_module
from flytekitplugins_rootcause.straggler.task import StragglerPrecheck, StragglerPrecheckFunctionTask, run_precheck
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck, StragglerConfigError
from rootcause_engine.upstream.readiness import Readiness

SETTINGS = SerializationSettings(
    project="p", domain="d", version="v1",
    image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/acme/train", tag="1")),
)

#: What the tasks' bodies would return, had they run.
BODY_RAN = "the body of a StragglerPrecheck task ran"


def _precheck(action: str = "fail", **task_kwargs: Any) -> StragglerPrecheckFunctionTask:
    @task(task_config=StragglerPrecheck(nnodes="2:3", nproc_per_node=1, check=StragglerCheck(action=action)),
          **task_kwargs)
    def precheck(epochs: int) -> StragglerReport:
        return StragglerReport(skipped=BODY_RAN)  # never run: the check is the body

    return precheck  # type: ignore[return-value]


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """kfpytorch's launch, stood in for: each call records what its workers would run and the inputs."""
    launched: list[tuple[Any, dict[str, Any]]] = []

    def launch(self: PytorchElasticFunctionTask, **kwargs: Any) -> StragglerReport:
        launched.append((self.task_function, kwargs))
        return StragglerReport(action="launched")

    monkeypatch.setattr(PytorchElasticFunctionTask, "_execute", launch)
    return launched


def test_a_check_that_is_not_a_straggler_check_is_refused() -> None:
    with pytest.raises(StragglerConfigError, match=r"takes a StragglerCheck, got \{'action': 'fail'\}"):
        StragglerPrecheck(nnodes=2, check={"action": "fail"})  # type: ignore[arg-type]


@pytest.mark.parametrize("nnodes", ["3:2", "two", 0])
def test_nnodes_kfpytorch_would_not_launch_is_refused_at_the_definition(nnodes: int | str) -> None:
    with pytest.raises(StragglerConfigError, match="nnodes"):
        StragglerPrecheck(nnodes=nnodes)


def test_the_agent_looks_at_its_workers_as_often_as_elastic_root_cause_s() -> None:
    assert StragglerPrecheck(nnodes=2).monitor_interval == DEFAULT_MONITOR_INTERVAL_S < 5
    assert StragglerPrecheck(nnodes=2, monitor_interval=5).monitor_interval == 5


def test_the_deck_is_on_unless_the_task_turns_it_off() -> None:
    assert _precheck().enable_deck
    assert not _precheck(enable_deck=False).enable_deck
    with pytest.warns(FutureWarning, match="disable_deck was deprecated"):  # flytekit's, for the old name
        assert not _precheck(disable_deck=True).enable_deck


def test_its_pods_run_the_patched_entrypoint() -> None:
    command = _precheck().get_default_command(SETTINGS)
    assert command[0] == PATCHED_ENTRYPOINT and "pyflyte-execute" not in command


def test_the_launch_s_workers_run_the_check_and_the_task_keeps_its_function(monkeypatch: pytest.MonkeyPatch) -> None:
    launched = _launches(monkeypatch)
    precheck = _precheck()
    own = precheck.task_function
    assert precheck._execute(epochs=3) == StragglerReport(action="launched")
    ((workers_run, inputs),) = launched
    assert isinstance(workers_run, functools.partial) and workers_run.func is run_precheck
    assert workers_run.args == (StragglerCheck(action="fail"), "2:3") and inputs == {"epochs": 3}
    assert precheck.task_function is own


def test_a_kfpytorch_the_check_cannot_reach_is_a_skipped_report_not_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    launched = _launches(monkeypatch)
    reason = "flytekitplugins-kfpytorch 9.9 has no PytorchElasticFunctionTask._execute"
    monkeypatch.setattr(precheck_module, "precheck_readiness", lambda: Readiness(off_reason=reason))
    report = _precheck(action="warn")._execute(epochs=3)
    assert launched == []
    assert report == StragglerReport(skipped=f"root-cause diagnosis is off: {reason}; running as upstream Elastic",
                                     action="warn")


def test_a_swap_that_raises_is_a_skipped_report_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    launched = _launches(monkeypatch)

    @contextlib.contextmanager
    def broken_swap(task: Any, function: Any) -> Iterator[None]:
        raise AttributeError("_task_function is a read-only property here")
        yield

    monkeypatch.setattr(precheck_module, "task_function_swapped", broken_swap)
    precheck = _precheck()
    own = precheck.task_function
    report = precheck._execute(epochs=3)
    assert launched == [] and precheck.task_function is own
    assert report.action == "fail" and report.stragglers == []
    assert report.skipped == ("root-cause diagnosis is off: applying a patch raised AttributeError: _task_function "
                              "is a read-only property here; running as upstream Elastic")


def test_the_check_in_a_worker_ignores_the_task_s_inputs(monkeypatch: pytest.MonkeyPatch, server_port: int) -> None:
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server_port),
                        "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(name, value)
    report = run_precheck(StragglerCheck(action="warn", min_nodes=2), 1, epochs=3)
    assert report.skipped == "1 node(s), the check needs at least min_nodes=2" and report.action == "warn"
