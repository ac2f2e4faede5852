"""The collective check (``rootcause_engine/straggler/check.py``) run by this process as the one worker of a
one-node job on a real gloo group over a loopback ``TCPStore``: the worker's identity, the skipped report, the
object exchange the check uses, and the error when its group cannot form. (Several nodes: the scenarios.)"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import torch
import torch.distributed as dist

from rootcause_engine.straggler.check import _all_gather, _broadcast, current_identity, run_check
from rootcause_engine.straggler.samples import WorkerIdentity, WorkerSample
from rootcause_engine.straggler.settings import StragglerCheck, StragglerCheckError, StragglerConfigError, Workload

if TYPE_CHECKING:
    from torch.distributed import TCPStore

TINY = Workload(matmul_size=8, matmuls_per_trial=1, allreduce_numel=4, allreduces_per_trial=1, trials=1)


def worker_env(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """The only worker of a one-node job, as torch elastic starts it, on the agent's store at ``port``."""
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("GROUP_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)),
                        ("TORCHELASTIC_USE_AGENT_STORE", "True"), ("FLYTE_INTERNAL_WORKER_NAME", "train-worker-0")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PET_RDZV_ENDPOINT", raising=False)


@pytest.fixture
def one_worker(store_server: TCPStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[TCPStore]:
    worker_env(monkeypatch, store_server.port)
    yield store_server
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_identity_is_read_from_torch_elastic_s_environment(
    one_worker: TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("GROUP_RANK", "2")
    assert current_identity() == WorkerIdentity(
        rank=5, local_rank=1, node_rank=2, pod="train-worker-0", host=socket.gethostname(), hosts_rendezvous=None
    )
    # the rendezvous endpoint's port: this test's parent process does not listen on it
    monkeypatch.setenv("PET_RDZV_ENDPOINT", f"127.0.0.1:{one_worker.port}")
    assert current_identity().hosts_rendezvous is False


def test_outside_torch_elastic_the_check_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROUP_RANK", raising=False)
    with pytest.raises(StragglerConfigError, match="GROUP_RANK"):
        run_check(StragglerCheck(workload=TINY))


def test_one_node_is_skipped_with_the_settings_it_would_have_run_with(one_worker: TCPStore) -> None:
    check = StragglerCheck(threshold=1.4, network_threshold=2.5, rounds=3, action="fail", workload=TINY, timeout_s=30)
    report = run_check(check)
    assert report.skipped == "1 node(s), the check needs at least min_nodes=2"
    assert report.nodes == [] and report.flagged == []
    assert (report.threshold, report.network_threshold, report.rounds, report.action) == (1.4, 2.5, 3, "fail")
    assert (report.device, report.backend, report.dtype) == ("cpu", "gloo", "float32")
    assert (report.matmul_size, report.allreduce_numel) == (8, 4)
    assert report.wall_time_s > 0
    assert not dist.is_initialized()  # the check's own group is gone


def test_the_check_runs_inside_the_user_s_group_and_leaves_it(one_worker: TCPStore) -> None:
    dist.init_process_group("gloo", store=one_worker, rank=0, world_size=1)
    users_group = dist.group.WORLD
    report = run_check(StragglerCheck(workload=TINY, min_nodes=3, timeout_s=30))
    assert report.skipped == "1 node(s), the check needs at least min_nodes=3"
    assert dist.is_initialized() and dist.group.WORLD is users_group


def test_objects_go_through_the_group_whole(one_worker: TCPStore) -> None:
    dist.init_process_group("gloo", store=one_worker, rank=0, world_size=1)
    sample = WorkerSample(rank=0, node_rank=0, round_index=1, compute_s=(0.5, 0.25), comm_s=None, error="ü" * 300)
    assert _all_gather(sample, torch.device("cpu")) == [sample]
    groups = [(0, 3), (1, 2)]
    assert _broadcast(groups, torch.device("cpu")) == groups
    assert _broadcast(dataclasses.asdict(sample), torch.device("cpu")) == dataclasses.asdict(sample)


def test_a_group_that_cannot_form_fails_naming_the_pod_and_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:  # bound, never listening: nobody answers on this port
        closed.bind(("127.0.0.1", 0))
        worker_env(monkeypatch, closed.getsockname()[1])
        with pytest.raises(StragglerCheckError) as raised:
            run_check(StragglerCheck(workload=TINY, timeout_s=0.2))
    message = str(raised.value)
    assert message.startswith(
        "the straggler check could not complete on pod 'train-worker-0' (rank 0, node rank 0): "
    )
    assert "bounded by StragglerCheck(timeout_s=0.2)" in message and "see that pod's log" in message
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert not dist.is_initialized()
