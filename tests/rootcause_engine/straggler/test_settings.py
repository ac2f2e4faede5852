"""Settings validation, the report as a task output and in the fail error, and the task type
(the action plan, the table and the Deck: ``test_actions.py``, ``test_report.py``, ``test_page.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import flytekit
import pytest
from flytekit import task
from flytekit.core.context_manager import ExecutionState, FlyteContextManager
from flytekit.core.type_engine import TypeEngine
from flytekit.exceptions.user import FlyteUserRuntimeException
from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask

from flytekitplugins_rootcause.straggler import (
    Action,
    StragglerCheck,
    StragglerConfigError,
    StragglerDetectedError,
    StragglerPrecheck,
    StragglerPrecheckFunctionTask,
    StragglerReport,
    Workload,
    validate_for_task,
)
from rootcause_engine.agent.rendezvous_host import endpoint_port, process_listens_on
from tests import REPO_ROOT
from tests.rootcause_engine.straggler.made_reports import report

REPO = REPO_ROOT
PYFLYTE = str(Path(sys.executable).with_name("pyflyte"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 1.0}, "threshold must be > 1.0"),
        ({"network_threshold": 0.5}, "network_threshold must be > 1.0"),
        ({"rounds": 0}, "rounds must be a positive integer"),
        ({"workload": "big"}, "workload must be 'auto' or a Workload"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
        ({"action": "ignore"}, "action must be one of 'warn', 'fail', 'exclude'"),
        ({"min_nodes": 1}, "min_nodes must be an integer >= 2"),
        ({"min_excess_s": -1}, "min_excess_s must be >= 0"),
    ],
)
def test_bad_settings_get_a_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StragglerCheck(**kwargs)


def test_workload_must_be_positive_integers() -> None:
    with pytest.raises(ValueError, match=r"Workload\.matmul_size must be a positive integer"):
        Workload(matmul_size=0, matmuls_per_trial=1, allreduce_numel=1, allreduces_per_trial=1)


def test_auto_workload_is_sized_to_the_device() -> None:
    check = StragglerCheck()
    assert check.workload_for("cuda").matmul_size > check.workload_for("cpu").matmul_size
    explicit = Workload(matmul_size=64, matmuls_per_trial=2, allreduce_numel=8, allreduces_per_trial=1)
    assert StragglerCheck(workload=explicit).workload_for("cuda") is explicit
    assert StragglerCheck(action="fail").action is Action.FAIL


def test_exclude_needs_a_node_range_and_a_restart() -> None:
    exclude = StragglerCheck(action="exclude")
    with pytest.raises(StragglerConfigError, match=r"needs nnodes as a range .min:max.*nnodes=4 is fixed"):
        validate_for_task(exclude, 4, max_restarts=1)
    with pytest.raises(StragglerConfigError, match="set max_restarts >= 1"):
        validate_for_task(exclude, "3:4", max_restarts=0)
    with pytest.raises(StragglerConfigError, match="nnodes must be an integer or a range"):
        validate_for_task(exclude, "three", max_restarts=1)
    validate_for_task(exclude, "3:4", max_restarts=1)
    validate_for_task(StragglerCheck(action="fail"), 4, max_restarts=0)




def test_a_process_is_seen_to_listen_on_the_rendezvous_port(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert process_listens_on(os.getpid(), port)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not process_listens_on(child.pid, port)
        finally:
            child.kill()
            child.wait()
    assert not process_listens_on(os.getpid(), port)  # closed
    assert endpoint_port("worker-0.job:29400") == 29400
    assert endpoint_port(None) is None and endpoint_port("no-port") is None


def test_fail_error_names_the_slow_pods_and_is_not_recoverable() -> None:
    error = StragglerDetectedError(report("ok", "slow-compute", "ok", "slow-network"))
    assert isinstance(error, FlyteUserRuntimeException)
    text = str(error)
    assert "pod 'pod-1' (node rank 1) is slow-compute" in text
    assert "pod 'pod-3' (node rank 3) is slow-network" in text
    assert "before training started" in text


def test_report_is_a_task_output_that_round_trips() -> None:
    rep = report("ok", "slow-compute")
    ctx = FlyteContextManager.current_context()
    literal_type = TypeEngine.to_literal_type(StragglerReport)
    literal = TypeEngine.to_literal(ctx, rep, StragglerReport, literal_type)
    assert TypeEngine.to_python_value(ctx, literal, StragglerReport) == rep


def test_precheck_is_an_elastic_task_returning_the_report() -> None:
    @task(task_config=StragglerPrecheck(nnodes=2, nproc_per_node=1, check=StragglerCheck(action="fail")))
    def precheck() -> StragglerReport:
        """Not run: the task returns the check's report."""

    assert isinstance(precheck, StragglerPrecheckFunctionTask)
    assert isinstance(precheck, PytorchElasticFunctionTask)
    assert precheck.enable_deck
    assert precheck.min_nodes == 2


def test_precheck_refuses_exclude_and_other_outputs() -> None:
    with pytest.raises(StragglerConfigError, match="action='exclude' has no job to shrink"):
        StragglerPrecheck(nnodes="1:2", check=StragglerCheck(action="exclude"))
    with pytest.raises(StragglerConfigError, match=r"-> StragglerReport"):

        @task(task_config=StragglerPrecheck(nnodes=2))
        def wrong() -> int:
            return 1


@pytest.mark.slow
def test_example_precheck_runs_with_pyflyte_and_reports_one_node_as_skipped(tmp_path: Path) -> None:
    """`pyflyte run` of the example: the StragglerPrecheck task launches, returns its report, and the
    next task receives it; one local node has nobody to compare with, so the check says skipped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_INTERNAL", "_F_", "PET_"))}
    completed = subprocess.run(
        [PYFLYTE, "run", str(REPO / "examples" / "straggler_precheck.py"), "precheck_then_train"],
        cwd=tmp_path,
        env=env | {"COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    assert "straggler check skipped: 1 node(s), the check needs at least min_nodes=2" in output


@pytest.mark.slow
def test_precheck_task_returns_the_report_and_adds_its_deck() -> None:
    """A real (local, one-node) launch: rank 0's report comes back as the task's value and its
    Deck reaches the task's context (kfpytorch carries rank 0's decks over)."""

    @task(task_config=StragglerPrecheck(nnodes=1, nproc_per_node=1, check=StragglerCheck()))
    def one_node_precheck() -> StragglerReport:
        """Not run: the task returns the check's report."""

    ctx = FlyteContextManager.current_context()
    state = ctx.new_execution_state().with_params(mode=ExecutionState.Mode.TASK_EXECUTION)
    with FlyteContextManager.with_context(ctx.with_execution_state(state)):
        result = one_node_precheck.execute()
        decks = {d.name: d for d in flytekit.current_context().decks}
    assert isinstance(result, StragglerReport)
    assert result.skipped == "1 node(s), the check needs at least min_nodes=2"
    assert "straggler check skipped" in decks["Straggler check"].html
