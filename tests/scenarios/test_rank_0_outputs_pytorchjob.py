"""flytekit: a pod without rank 0 exits only once rank 0's pod wrote ``outputs.pb``.

The training operator marks a PyTorchJob Succeeded at the first pod that exits 0, and Flyte reads the
outputs then; the pod without rank 0 writes nothing (kfpytorch's ``IgnoreOutputs``), so it must not
exit before rank 0's pod wrote them. A real 2-pod job whose rank-0 pod writes its outputs seconds late
(``tests/elastic_tasks/slow_rank_0_outputs.py``), the store looks on every store kind, the wait's
bound, and the roads on which ``IgnoreOutputs`` is not held back.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.data_persistence import FileAccessProvider
from flytekit.exceptions.user import FlyteRecoverableException
from torch.distributed.elastic.multiprocessing.api import SignalException

from flytekitplugins_rootcause import ElasticRootCause, rank_0_outputs
from flytekitplugins_rootcause.exceptions import Rank0OutputsMissingError
from flytekitplugins_rootcause.rank_0_outputs import OutputPrefix, await_rank_0_outputs, rank_0_outputs_awaited
from rootcause_core.error_files import is_error_file_name
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.settings import DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, run_job
from testbed.object_stores import ObjectStore
from tests.elastic_tasks import slow_rank_0_outputs
from tests.entrypoint_tasks.harness import flytekit_file_access, list_names, read_outputs


@pytest.mark.slow
def test_the_pod_without_rank_0_exits_after_rank_0_s_pod_wrote_outputs_pb(file_store: ObjectStore,
                                                                        tmp_path: Path) -> None:
    spec = JobSpec(task=slow_rank_0_outputs.each_rank_returns_its_own, nnodes=2, nproc_per_node=1,
                   store=StoreAccess(file_store.root), timeout_s=180)
    result = run_job(spec, work_dir=tmp_path)
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and [pod.returncode for pod in result.pods] == [0, 0], logs
    rank_0_pod, _ = result.placement[0]
    (waiting,) = [pod for pod in result.pods if pod.name != rank_0_pod]
    written_ns = Path(result.output_prefix, "outputs.pb").stat().st_mtime_ns
    assert written_ns <= waiting.exited_ns, f"{waiting.name} exited {(written_ns - waiting.exited_ns) / 1e9:.1f} s "\
        f"before outputs.pb was written; {logs}"
    assert not any(is_error_file_name(name) for name in list_names(file_store, result.output_prefix)), logs
    outputs = read_outputs(file_store, result.output_prefix)
    assert outputs.literals["o0"].scalar.primitive.float_value == slow_rank_0_outputs.BASE, logs
    # what Flyte reads at the first pod exit: the outputs, whichever pod exited first
    assert result.operator.succeeded and (result.operator.snapshot / "outputs.pb").is_file(), logs




@pytest.mark.slow
def test_the_looks_see_files_written_after_an_earlier_look_listed_the_prefix(
    any_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsspec shares filesystem instances and caches listings (gcsfs, s3fs): a look made after an
    earlier listing of the prefix must still see a file another pod wrote since."""
    prefix = any_store.new_prefix("rank-0")
    where = OutputPrefix(flytekit_file_access(tmp_path, any_store, monkeypatch), prefix)
    other_pod = any_store.filesystem()
    if any_store.protocol == "file":
        other_pod.makedirs(prefix, exist_ok=True)
    other_pod.pipe_file(f"{prefix}/inputs.pb", b"")  # the prefix exists, listed empty of both files
    assert (where.outputs_written(), where.error_written()) == (False, False)
    other_pod.pipe_file(f"{prefix}/error-train-worker-0-{'0' * 32}.pb", b"")
    assert (where.outputs_written(), where.error_written()) == (False, True)
    other_pod.pipe_file(f"{prefix}/outputs.pb", b"")
    assert where.outputs_written()


def test_a_prefix_nothing_was_written_to_holds_neither(tmp_path: Path) -> None:
    where = OutputPrefix(FileAccessProvider(str(tmp_path / "sandbox"), str(tmp_path)), str(tmp_path / "none"))
    assert (where.outputs_written(), where.error_written()) == (False, False)
    Path(tmp_path, "none").mkdir()
    Path(tmp_path, "none", ".tmp-0123").write_bytes(b"")  # an error document being written, not yet named
    assert where.error_written() is False


def test_when_the_bound_passes_the_pod_raises_a_recoverable_error_naming_rank_0(tmp_path: Path) -> None:
    where = OutputPrefix(FileAccessProvider(str(tmp_path / "sandbox"), str(tmp_path)), str(tmp_path))
    with pytest.raises(Rank0OutputsMissingError) as raised:
        await_rank_0_outputs(where, PeerWatch("train-worker-1"), timeout_s=0.3)
    assert isinstance(raised.value, FlyteRecoverableException)
    assert raised.value.missing.wait.waited_s >= 0.3
    message = str(raised.value)
    assert "the pod holding global rank 0 wrote neither outputs.pb nor an error document" in message
    assert f"under {tmp_path}: this pod waited 0 s" in message and "This pod (train-worker-1," in message


def test_an_error_document_ends_the_wait_without_an_error_of_this_pod(tmp_path: Path) -> None:
    Path(tmp_path, f"error-train-worker-0-{'0' * 32}.pb").write_bytes(b"")
    where = OutputPrefix(FileAccessProvider(str(tmp_path / "sandbox"), str(tmp_path)), str(tmp_path))
    await_rank_0_outputs(where, PeerWatch("train-worker-1"), timeout_s=60)


def test_ignore_outputs_is_held_back_only_after_a_launch_that_returned_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kfpytorch also raises ``IgnoreOutputs`` while it handles torch's ``SignalException`` (this pod's
    agent was told to stop: the pod is being ended, and must not linger); a local run has no output
    prefix (nothing reads outputs there)."""
    waits: list[OutputPrefix] = []
    where: OutputPrefix | None = OutputPrefix(FileAccessProvider(str(tmp_path / "s"), str(tmp_path)), str(tmp_path))
    monkeypatch.setattr(rank_0_outputs, "current_output_prefix", lambda: where)
    monkeypatch.setattr(rank_0_outputs, "await_rank_0_outputs", lambda prefix, peers, timeout_s: waits.append(prefix))

    def ignored(*, signalled: bool) -> None:
        with pytest.raises(IgnoreOutputs), rank_0_outputs_awaited(PeerWatch("train-worker-1"), timeout_s=60):
            if not signalled:
                raise IgnoreOutputs()
            try:
                raise SignalException("Process got signal: 15", signal.SIGTERM)
            except SignalException:
                raise IgnoreOutputs() from None

    ignored(signalled=False)
    assert waits == [where]
    ignored(signalled=True)
    where = None
    ignored(signalled=False)
    assert waits == [OutputPrefix(waits[0].file_access, str(tmp_path))]


def test_the_bound_is_a_setting_with_a_default_and_a_bound_of_zero_is_refused() -> None:
    assert ElasticRootCause(nnodes=2, nproc_per_node=1).rank_0_outputs_timeout_s == DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S
    with pytest.raises(ValueError, match="rank_0_outputs_timeout_s must be > 0 seconds, got 0"):
        ElasticRootCause(nnodes=2, nproc_per_node=1, rank_0_outputs_timeout_s=0)
