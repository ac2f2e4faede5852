"""Flyte 2: a pod without rank 0 exits only once rank 0's pod wrote ``outputs.pb``.

The training operator marks a PyTorchJob Succeeded at the first pod that exits 0, and Flyte reads the
outputs then; the pod without rank 0 writes nothing (``leave_outputs_to_rank_0``), so it must not exit
before rank 0's pod wrote them. Real 2-pod jobs through ``a0`` whose rank-0 pod writes its outputs
seconds late (``tests/flyte2_tasks/slow_rank_0_outputs.py``): waited for; and, with a bound shorter
than that, the waiting pod's error in ``error.pb`` (raised before the marking, which would hide it).
Then the store looks and the error on their own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from flyte._internal.runtime.convert import convert_from_native_to_error
from flyteidl2.core import execution_pb2

from flyteplugins.rootcause import ElasticRootCause
from flyteplugins.rootcause.action_outputs import ActionOutputs
from flyteplugins.rootcause.exceptions import RANK_0_OUTPUTS_MISSING_CODE, Rank0OutputsMissingError
from flyteplugins.rootcause.rank_0_outputs import await_rank_0_outputs
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.settings import DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S
from rootcause_harness.flyte2.job import JobResult, JobSpec, run_job
from tests.flyte2_tasks import slow_rank_0_outputs
from tests.scenarios.succeeded_jobs import assert_no_pod_wrote_an_error


def _run(task: object, tmp_path: Path) -> tuple[JobResult, str]:
    spec = JobSpec(task=task, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket", timeout_s=180)  # type: ignore[arg-type]
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and 0 in result.placement, logs
    return result, logs


@pytest.mark.slow
def test_the_pod_without_rank_0_exits_after_rank_0_s_pod_wrote_outputs_pb(tmp_path: Path) -> None:
    result, logs = _run(slow_rank_0_outputs.each_rank_returns_its_own, tmp_path)
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    rank_0_pod, _ = result.placement[0]
    (waiting,) = [pod for pod in result.pods if pod.name != rank_0_pod]
    written_ns = (result.output_prefix / "outputs.pb").stat().st_mtime_ns
    assert written_ns <= waiting.exited_ns, f"{waiting.name} exited {(written_ns - waiting.exited_ns) / 1e9:.1f} s "\
        f"before outputs.pb was written; {logs}"
    assert_no_pod_wrote_an_error(result)
    assert result.output == slow_rank_0_outputs.BASE, logs
    # what Flyte reads at the first pod exit: the outputs, whichever pod exited first
    assert result.operator.succeeded and (result.operator.snapshot / "outputs.pb").is_file(), logs


@pytest.mark.slow
def test_a_pod_that_waited_past_the_bound_writes_a_recoverable_error_naming_rank_0_s_pod(tmp_path: Path) -> None:
    result, logs = _run(slow_rank_0_outputs.rank_0_outlasts_the_wait, tmp_path)
    rank_0_pod, _ = result.placement[0]
    (waiting,) = [pod for pod in result.pods if pod.name != rank_0_pod]
    # a0 exits 0 once it wrote error.pb: the operator marks the job Succeeded, and Flyte reads the error
    assert [pod.returncode for pod in result.pods] == [0, 0], logs
    assert result.operator.pod == waiting.name and (result.operator.snapshot / "error.pb").is_file(), logs
    document = result.error_document
    assert document is not None, logs
    error = document.error
    assert (error.code, error.kind) == (RANK_0_OUTPUTS_MISSING_CODE, execution_pb2.ContainerError.RECOVERABLE), logs
    assert f"the pod holding global rank 0 ({rank_0_pod}) wrote neither outputs.pb" in error.message, logs
    assert f"This pod ({waiting.name}, global rank 1)" in error.message, logs


def test_the_looks_find_outputs_pb_and_error_pb_under_the_output_path(tmp_path: Path) -> None:
    where = ActionOutputs(str(tmp_path))
    assert (where.outputs_written(), where.error_written()) == (False, False)
    (tmp_path / "error.pb").write_bytes(b"")
    assert (where.outputs_written(), where.error_written()) == (False, True)
    (tmp_path / "outputs.pb").write_bytes(b"")
    assert where.outputs_written()


def test_when_the_bound_passes_the_pod_raises_an_error_flyte_2_retries(tmp_path: Path) -> None:
    with pytest.raises(Rank0OutputsMissingError) as raised:
        asyncio.run(await_rank_0_outputs(str(tmp_path), PeerWatch("train-worker-1"), timeout_s=0.3))
    assert raised.value.missing.wait.waited_s >= 0.3
    converted = convert_from_native_to_error(raised.value)
    assert converted.recoverable and converted.err.code == RANK_0_OUTPUTS_MISSING_CODE
    assert converted.err.kind == execution_pb2.ExecutionError.SYSTEM and converted.err.worker == "train-worker-1"
    assert "the pod holding global rank 0 wrote neither outputs.pb nor an error document" in converted.err.message


def test_outputs_pb_written_meanwhile_ends_the_wait(tmp_path: Path) -> None:
    async def rank_0_writes_later() -> None:
        await asyncio.sleep(0.5)
        (tmp_path / "outputs.pb").write_bytes(b"")

    async def both() -> None:
        await asyncio.gather(await_rank_0_outputs(str(tmp_path), PeerWatch("train-worker-1"), timeout_s=60),
                             rank_0_writes_later())

    asyncio.run(both())  # the loop runs on a thread of its own: a0's event loop went on meanwhile


def test_the_bound_is_a_setting_of_flyte_2_s_config_too() -> None:
    assert ElasticRootCause(nnodes=2, nproc_per_node=1).rank_0_outputs_timeout_s == DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S
    with pytest.raises(ValueError, match="rank_0_outputs_timeout_s must be > 0 seconds"):
        ElasticRootCause(nnodes=2, nproc_per_node=1, rank_0_outputs_timeout_s=-1.0)
