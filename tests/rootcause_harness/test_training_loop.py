"""``rootcause_harness/training_loop.py`` on worlds of one and two gloo processes on loopback: each
communication's exchange, the placement a worker records, and a run with and without its injected fault."""

from __future__ import annotations

import json
import multiprocessing
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rootcause_harness.faults import FAULT_VARIABLE, INJECTED_MESSAGE, SIM_DIR_VARIABLE, Communication, Fault, FaultKind
from rootcause_harness.loopback import free_port
from rootcause_harness.pods import read_placement
from rootcause_harness.training_loop import RANKS_DIR, _record_placement, exchange, run_training

#: Every communication but the broadcasts (whose source the caller picks): what rank ``r`` of two
#: gets back when it sends a tensor of ``r + 1``.
EXPECTED = {
    Communication.ALL_REDUCE: [3.0, 3.0],
    Communication.ALL_GATHER: [3.0, 3.0],
    Communication.REDUCE_SCATTER: [3.0, 3.0],
    Communication.BARRIER: [1.0, 2.0],  # nothing exchanged
    Communication.SEND_RECV: [2.0, 1.0],  # each receives the previous rank's (a ring of two)
}


def _exchange_in_a_world_of_two(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    got = {}
    for communication in EXPECTED:
        result = exchange(communication, torch.full((4, 3), float(rank + 1)), None, 0)
        assert result.shape == (4, 3)
        got[communication.value] = float(result.unique().item())
    got["broadcast from 1"] = float(exchange(Communication.BROADCAST_ROOT, torch.full((2,), rank + 1.0), None,
                                             1).unique().item())
    dist.destroy_process_group()
    Path(out).write_text(json.dumps(got))


def test_each_communication_exchanges_as_it_says_between_two_ranks(tmp_path: Path) -> None:
    context, port = multiprocessing.get_context("fork"), free_port()
    outs = [tmp_path / f"rank{rank}.json" for rank in range(2)]
    procs = [context.Process(target=_exchange_in_a_world_of_two, args=(rank, port, str(outs[rank])))
             for rank in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0]
    for rank, out in enumerate(outs):
        got = json.loads(out.read_text())
        assert got == {**{c.value: values[rank] for c, values in EXPECTED.items()}, "broadcast from 1": 2.0}


def test_a_worker_records_its_pod_and_local_rank_under_its_global_rank(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIM_DIR_VARIABLE, str(tmp_path))
    _record_placement(5, "p-1", 1)
    _record_placement(2, "p-0", 0)
    assert (tmp_path / RANKS_DIR / "5").read_text() == "p-1\n1"
    assert read_placement(tmp_path) == {5: ("p-1", 1), 2: ("p-0", 0)}


def test_without_a_sim_dir_nothing_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SIM_DIR_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    _record_placement(0, "p-0", 0)
    assert list(tmp_path.iterdir()) == []


def test_a_run_trains_its_steps_records_its_placement_and_leaves_no_group(world_of_one: Path) -> None:
    loss = run_training(2, collective_timeout_s=5, init_timeout_s=10)
    assert 0.9 < loss < 1.1 and loss != 1.0  # the weights (ones) moved by the small updates
    assert read_placement(world_of_one) == {0: ("train-worker-0", 0)}
    assert not dist.is_initialized()


def test_the_injected_fault_strikes_the_run_at_its_step(world_of_one: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_VARIABLE, Fault(FaultKind.RAISE, pod="train-worker-0", step=1).to_env())
    with pytest.raises(RuntimeError, match=f"^{INJECTED_MESSAGE} on train-worker-0 local rank 0 at step 1$"):
        run_training(4)
    assert dist.is_initialized()  # it struck inside the training: the group is still up
    assert (world_of_one / "faulty_pod").read_text() == "train-worker-0"


def test_a_fault_before_init_strikes_before_the_group_forms(world_of_one: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_VARIABLE, Fault(FaultKind.RAISE, pod="train-worker-0", step=-1).to_env())
    with pytest.raises(RuntimeError, match=INJECTED_MESSAGE):
        run_training(4)
    assert not dist.is_initialized()
    assert read_placement(world_of_one) == {0: ("train-worker-0", 0)}  # placed even so
