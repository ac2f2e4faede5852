"""``rootcause_harness/flytekit/straggler_cluster.py`` without launching agents: a simulated slow device's
cost, an agent's arguments, the outcome read back from a node's files, and a worker's stand-in user
function run in a world of one."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_harness.flytekit.straggler_cluster import (
    SimulatedCluster,
    _outcome,
    _parse,
    _worker,
    pod_name_of,
    run_cluster,
    slow_device,
)
from rootcause_harness.loopback import free_port


def _busy_trial(cpu_s: float, spent: list[float]) -> None:
    started = time.process_time()
    while time.process_time() - started < cpu_s:
        pass
    spent.append(time.process_time() - started)


def test_a_slow_device_runs_the_trial_once_and_costs_factor_times_its_cpu() -> None:
    spent: list[float] = []
    started = time.process_time()
    slow_device(3.0)(lambda: _busy_trial(0.01, spent))
    total = time.process_time() - started
    assert len(spent) == 1
    assert total >= 3.0 * spent[0]


@pytest.mark.parametrize("factor", [math.nan, 0.0, -2.0])
def test_a_factor_that_is_not_at_least_one_is_refused(factor: float) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        slow_device(factor)


def test_an_agents_arguments_are_parsed_with_their_types() -> None:
    args = _parse(["/w/cluster.pkl", "2", "29500", "sim-1-2", "/w"])
    assert (args.spec, args.index, args.port, args.run_id, args.workdir) == ("/w/cluster.pkl", 2, 29500, "sim-1-2",
                                                                             "/w")
    with pytest.raises(SystemExit):
        _parse(["/w/cluster.pkl", "two", "29500", "r", "/w"])


def test_a_cluster_pickles_whole_for_its_agents(tmp_path: Path) -> None:
    cluster = SimulatedCluster(nodes=3, check=StragglerCheck(), schedule=({1: 2.0}, {}), nnodes="2:3",
                               cpus=frozenset({0}))
    assert pickle.loads(pickle.dumps(cluster)) == cluster
    assert (cluster.start_method, cluster.max_restarts, cluster.nproc_per_node) == ("fork", 0, 1)
    assert run_cluster(dataclasses.replace(cluster, nodes=0), tmp_path / "w") == []  # no agent to wait for
    assert pickle.loads((tmp_path / "w" / "cluster.pkl").read_bytes()) == dataclasses.replace(cluster, nodes=0)


def test_a_nodes_outcome_is_read_from_its_reports_markers_and_log(tmp_path: Path) -> None:
    pod = pod_name_of(1)
    assert pod == "sim-node-1"
    for name, threshold in (("a0-0001", 1.5), ("a0-0000", 1.2)):
        report = StragglerReport(threshold=threshold, action="warn")
        (tmp_path / f"report-{pod}-rank1-{name}.json").write_text(json.dumps(dataclasses.asdict(report)))
    (tmp_path / f"report-{pod_name_of(0)}-rank0-a0-0000.json").write_text("not this node's")
    (tmp_path / f"trained-{pod}-rank1-a0").write_text("2")
    (tmp_path / f"trained-{pod}-rank1-a1").write_text("1")
    (tmp_path / "agent-1.log").write_bytes(b"agent 1 started\n\xff")
    outcome = _outcome(1, 3, tmp_path)
    assert (outcome.index, outcome.pod, outcome.returncode) == (1, pod, 3)
    assert [report.threshold for report in outcome.reports] == [1.2, 1.5]  # in the checks' order
    assert outcome.trained_world_sizes == [2, 1]
    assert outcome.log.startswith("agent 1 started\n")


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.usefixtures("world_of_one")
def test_a_worker_without_checks_runs_the_user_function_and_marks_its_world_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = SimulatedCluster(nodes=1, check=StragglerCheck(), schedule=())
    assert _worker(cluster, 0, str(tmp_path)) == 1
    assert (tmp_path / "trained-sim-node-0-rank0-a0").read_text() == "1"
    assert not dist.is_initialized()  # the user function's group is its own, destroyed
    out = capsys.readouterr().out
    assert "[simulate] worker rank 0 of sim-node-0 started" in out
    assert "[simulate] worker rank 0 of sim-node-0: user function done" in out
    assert _outcome(0, 0, _log_in(tmp_path)).trained_world_sizes == [1]


def _log_in(folder: Path) -> Path:
    (folder / "agent-0.log").write_text("")
    return folder
