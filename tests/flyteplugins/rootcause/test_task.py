"""``flyteplugins.rootcause.task``: the launch config and engine settings ``RootCauseTorchFunctionTask`` builds from
its ``ElasticRootCause``, what its workers run, the error a pod raises, its container args, and when it runs
upstream's ``execute`` instead (upstream's launch stood in for; no job)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import flyte
import pytest
from flyte.models import SerializationContext
from flyteplugins.pytorch.task import TorchFunctionTask

from flyteplugins.rootcause import ElasticRootCause, RootCauseTorchFunctionTask
from flyteplugins.rootcause import task as task_module
from flyteplugins.rootcause.exceptions import AgentHungError, ElasticRootCauseRecoverableError
from flyteplugins.rootcause.report import READINESS_TAB
from flyteplugins.rootcause.report_page import tabs_of_page
from flyteplugins.rootcause.upstream import ROOTCAUSE_RUNTIME_SCRIPT
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger, report_for
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.launch_session import RENDEZVOUS_ENDPOINT_VARIABLE
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_engine.straggler.worker import StragglerCheckHook
from rootcause_engine.upstream.readiness import PatchesNotApplied, Readiness
from rootcause_engine.worker.process_settings import BeforeUserFunction, WorkerProcessSettings
from tests.entrypoint_tasks.raising import failures
from tests.flyteplugins.rootcause.action_context import RUN_NAME, process_of_the_action

REPO = Path(__file__).resolve().parents[3]

plain_env = flyte.TaskEnvironment(
    name="rootcause_task_contract",
    plugin_config=ElasticRootCause(nnodes="2:3", nproc_per_node=2, max_restarts=1, collective_timeout_s=60.0,
                                   nccl_async_error_handling=True, nccl_heartbeat_timeout_sec=90),
)
checked_env = flyte.TaskEnvironment(
    name="rootcause_task_contract_checked",
    plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=1, straggler_check=StragglerCheck(action="fail")),
)


@plain_env.task(report=True)
def train(epochs: int = 1) -> float:
    return float(epochs) * 2


@checked_env.task
def checked_train(epochs: int = 1) -> float:
    return float(epochs)


def _upstream_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Upstream's ``execute``, stood in for: records each call's inputs."""
    calls: list[dict[str, Any]] = []

    async def execute(self: TorchFunctionTask, *args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return "upstream's launch"

    monkeypatch.setattr(TorchFunctionTask, "execute", execute)
    return calls


def _readiness_tab(output_path: Path) -> str:
    tabs = tabs_of_page((output_path / "report.html").read_text())
    assert tabs is not None
    return dict(tabs)[READINESS_TAB]


def test_the_config_s_type_makes_flyte_build_this_task() -> None:
    assert isinstance(train, RootCauseTorchFunctionTask) and isinstance(checked_train, RootCauseTorchFunctionTask)
    assert task_module.RETRY_RULE is RetryRule.UNLESS_REFUSED and task_module.START_METHOD == "spawn"


def test_the_launch_config_is_upstream_s_with_the_config_s_sub_second_monitor_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RENDEZVOUS_ENDPOINT_VARIABLE, "train-worker-0:29400")
    with process_of_the_action(tmp_path):
        config = train._launch_config()
    assert (config.run_id, config.min_nodes, config.max_nodes, config.nproc_per_node) == (RUN_NAME, 2, 3, 2)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.max_restarts) == ("c10d", "train-worker-0:29400", 1)
    assert config.monitor_interval == train.plugin_config.monitor_interval < 1
    assert config.start_method == "spawn"
    monkeypatch.delenv(RENDEZVOUS_ENDPOINT_VARIABLE)
    with process_of_the_action(tmp_path):
        assert train._launch_config().rdzv_endpoint == "localhost:0"  # upstream's default too


def test_the_engine_s_settings_carry_the_nodes_the_retry_rule_and_readiness_s_notes() -> None:
    readiness = Readiness(not_verified=("root-cause diagnosis not verified on flyte 9.9",))
    settings = train._launch_settings(readiness)
    assert (settings.min_nodes, settings.max_nodes, settings.start_method) == (2, 3, "spawn")
    assert settings.retry_rule is RetryRule.UNLESS_REFUSED and settings.notes == readiness.lines
    assert train._launch_settings().notes == ()
    # Elastic's async-error-handling flag is mode 1; its heartbeat timeout is in seconds
    assert settings.environment["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert settings.environment["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "90"


def test_elastic_s_nccl_flag_off_leaves_torch_s_default() -> None:
    environment = task_module._EngineEnvironment.of(ElasticRootCause(nnodes=2, nproc_per_node=1,
                                                                     nccl_async_error_handling=False))
    assert environment.nccl_async_error_handling is None
    assert task_module._EngineEnvironment.of(train.plugin_config).nccl_async_error_handling == 1


def test_the_workers_run_the_user_s_function_after_the_worker_settings(tmp_path: Path) -> None:
    recording = train._recording(str(tmp_path / "report.json"))
    assert recording.function is train.func
    assert recording.before_user_function == WorkerProcessSettings(collective_timeout_s=60.0,
                                                                         hang_probe=train.plugin_config.hang_probe)


def test_with_a_straggler_check_the_workers_run_it_after_the_settings_and_before_the_function(tmp_path: Path) -> None:
    recording = checked_train._recording(str(tmp_path / "report.json"))
    assert isinstance(recording.before_user_function, BeforeUserFunction)
    settings, hook = recording.before_user_function.hooks
    assert isinstance(settings, WorkerProcessSettings) and isinstance(hook, StragglerCheckHook)
    assert hook.check == StragglerCheck(action="fail") and hook.nnodes == 2


def test_a_pod_alone_raises_its_own_diagnosis_retryable_by_flyte_2_s_rule_with_the_notes_at_the_end(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``ZeroDivisionError`` is not a ``NonRecoverableError``: Flyte 2 may retry it."""
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", "pod-1")
    diagnosis = report_for(failures(recoverable=False))
    error = task_module._job_error(diagnosis, PeerWatch("pod-1"), train, ("not verified on flyte 9.9",))
    assert isinstance(error, ElasticRootCauseRecoverableError)
    message = error.agreed.message
    assert message.startswith(diagnosis.report.splitlines()[0]) and "Agreed by the failing pods: pod-1." in message
    assert message.endswith("\n\nnot verified on flyte 9.9") and error.agreed.worker == diagnosis.failures[0].worker


def test_a_hung_agent_without_a_failed_worker_raises_the_hung_agent_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", "pod-1")
    diagnosis = Diagnosis(Trigger.AGENT_HUNG, (), "the agent hung after every worker exited 0", True)
    error = task_module._job_error(diagnosis, PeerWatch("pod-1"), train)
    assert isinstance(error, AgentHungError) and error.diagnosis is diagnosis


def test_the_pod_runs_rootcause_a0_with_flyte_s_own_arguments() -> None:
    context = SerializationContext(version="v1", root_dir=REPO)
    ours = train.container_args(context)
    theirs = TorchFunctionTask.container_args(train, context)
    assert theirs[0] == "a0" and ours == [ROOTCAUSE_RUNTIME_SCRIPT, *theirs[1:]]


def test_a_pod_whose_diagnosis_is_off_runs_upstream_and_says_why_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _upstream_runs(monkeypatch)
    off = Readiness(off_reason="flyte 9.9 has no flyte._internal.runtime.io.report_path")
    monkeypatch.setattr(task_module, "flyte_readiness", lambda restart_policy: off)
    with process_of_the_action(tmp_path):
        assert asyncio.run(train.execute(epochs=3)) == "upstream's launch"
    assert calls == [{"epochs": 3}]
    assert _readiness_tab(tmp_path) == off.page


def test_a_local_run_calls_the_function_once_without_a_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _upstream_runs(monkeypatch)
    monkeypatch.setattr(task_module, "flyte_readiness", lambda restart_policy: Readiness())
    with process_of_the_action(tmp_path, mode="local"):
        assert asyncio.run(train.execute(epochs=3)) == 6.0
    assert calls == [] and not (tmp_path / "report.html").exists()


def test_patches_that_fail_to_apply_fall_back_to_upstream_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _upstream_runs(monkeypatch)
    monkeypatch.setattr(task_module, "flyte_readiness", lambda restart_policy: Readiness())

    async def observed(self: RootCauseTorchFunctionTask, readiness: Readiness, *args: Any, **kwargs: Any) -> Any:
        raise PatchesNotApplied("applying a patch raised TypeError: no signal handler here")

    monkeypatch.setattr(RootCauseTorchFunctionTask, "_observed_execute", observed)
    with process_of_the_action(tmp_path):
        assert asyncio.run(train.execute(epochs=3)) == "upstream's launch"
    assert calls == [{"epochs": 3}]
    assert "root-cause diagnosis is off: applying a patch raised TypeError: no signal handler here" in (
        _readiness_tab(tmp_path))
