"""The check across real torch elastic agents: one agent process per simulated node on 127.0.0.1.

Each test launches a ``SimulatedCluster`` (c10d rendezvous, gloo, one CPU worker per node) whose
workers run ``run_straggler_check_in_worker`` and then a stand-in user function that calls its own
``init_process_group`` and all-reduces over the whole job (so it also proves the check left no
process group behind). Slow nodes: the test-only compute slowdown for the deterministic cases, and
a real CPU quota (a cgroup) for one case.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from flytekitplugins_rootcause.straggler import StragglerCheck, Workload
from flytekitplugins_rootcause.straggler.simulate import (
    LEFT_EXIT_CODE,
    AgentOutcome,
    SimulatedCluster,
    run_cluster,
)

pytestmark = pytest.mark.slow


def verdicts(outcome: AgentOutcome) -> dict[str, str]:
    (report,) = outcome.reports
    return {n.pod: n.verdict for n in report.nodes}


def assert_ok(outcomes: list[AgentOutcome]) -> None:
    for o in outcomes:
        assert o.returncode == 0, f"{o.pod} exited {o.returncode}:\n{o.log[-3000:]}"


def test_homogeneous_odd_cluster_has_no_straggler_and_training_starts(tmp_path: Path) -> None:
    outcomes = run_cluster(SimulatedCluster(nodes=3, check=StragglerCheck()), tmp_path)
    assert_ok(outcomes)
    reports = [r for o in outcomes for r in o.reports]
    assert len(reports) == 3 and all(r == reports[0] for r in reports)  # one decision, broadcast
    report = reports[0]
    assert [n.verdict for n in report.nodes] == ["ok"] * 3, report.table()
    assert report.round_groups[0] == [[0, 1, 2]]  # the odd node joins the pair, never runs alone
    assert report.backend == "gloo" and report.dtype == "float32"
    assert not report.network_localizable
    assert sorted(n.pod for n in report.nodes) == ["sim-node-0", "sim-node-1", "sim-node-2"]
    assert [o.trained_world_sizes for o in outcomes] == [[3]] * 3


def _cpu_quota_cgroup(quota_us: int, period_us: int) -> Path | None:
    """A cgroup capping CPU at quota/period (v1 ``cpu`` or v2 ``cpu.max``); None where not allowed."""
    name = f"rootcause-straggler-test-{uuid.uuid4().hex[:8]}"
    candidates = [
        (
            Path("/sys/fs/cgroup/cpu"),
            lambda d: ((d / "cpu.cfs_period_us", period_us), (d / "cpu.cfs_quota_us", quota_us)),
        ),
        (Path("/sys/fs/cgroup"), lambda d: ((d / "cpu.max", f"{quota_us} {period_us}"),)),
    ]
    for root, files in candidates:
        if not (root / "cgroup.procs").exists() or (
            root == Path("/sys/fs/cgroup") and not (root / "cgroup.controllers").exists()
        ):
            continue
        path = root / name
        try:
            path.mkdir()
            for file, value in files(path):
                file.write_text(str(value))
        except OSError:
            if path.exists():
                path.rmdir()
            continue
        return path
    return None


@pytest.fixture
def throttled_cgroup() -> Iterator[Path | None]:
    """10% of one CPU (below the fair share this machine gives a process even when it is busy), or
    None where no cgroup can be made (not root, no writable cpu controller)."""
    path = _cpu_quota_cgroup(quota_us=2000, period_us=20000)
    yield path
    if path is not None:
        for _ in range(50):  # the workers have exited; the cgroup empties as soon as they are reaped
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_fail_action_names_a_really_slow_pod_and_stops_before_training(
    tmp_path: Path, throttled_cgroup: Path | None
) -> None:
    """A node under a real CPU quota is found, and ``fail`` stops every worker before the user's
    function. Where no cgroup can be made, the node is slowed 2x with the test-only hook instead."""
    # trials of ~13 ms of CPU (64 products of 256x256): the kernel enforces a quota at scheduler
    # ticks, so a task can overrun it by up to a tick (4 ms at HZ=250) before it is throttled; a
    # trial this long cannot fit in quota + overrun, so every trial of the throttled node waits
    # out several 20 ms periods (see measure.py on trial length)
    workload = Workload(
        matmul_size=256, matmuls_per_trial=64, allreduce_numel=1 << 14, allreduces_per_trial=2, trials=5
    )
    cluster = SimulatedCluster(
        nodes=2,
        check=StragglerCheck(workload=workload, action="fail"),
        cgroups={} if throttled_cgroup is None else {1: str(throttled_cgroup)},
        schedule=({1: 2.0},) if throttled_cgroup is None else ({},),
    )
    outcomes = run_cluster(cluster, tmp_path)
    for o in outcomes:
        assert o.returncode != 0, o.log[-3000:]
        assert o.trained_world_sizes == [], "the user's function ran although the check failed"
        assert "StragglerDetectedError" in o.log
        first_line = o.log.split("Straggler check failed before training started: ", 1)[1].splitlines()[0]
        assert first_line.startswith("pod 'sim-node-1' (node rank") and first_line.endswith("is slow-compute.")
        assert "sim-node-0" not in first_line


def test_exclude_drops_the_slow_pod_and_the_others_train_without_it(tmp_path: Path) -> None:
    cluster = SimulatedCluster(
        nodes=3,
        nnodes="2:3",
        max_restarts=1,
        check=StragglerCheck(action="exclude"),
        schedule=({1: 3.0},),
    )
    slow, *healthy = (o for o in sorted(run_cluster(cluster, tmp_path), key=lambda o: o.index != 1))
    assert slow.pod == "sim-node-1"
    assert slow.returncode == LEFT_EXIT_CODE, slow.log[-3000:]
    assert slow.trained_world_sizes == []
    assert "this node was flagged; its agent stops" in slow.log
    for o in healthy:
        assert o.returncode == 0, o.log[-3000:]
        assert o.trained_world_sizes == [2], o.log[-3000:]  # re-formed without the straggler
        assert "pod 'sim-node-1' (node rank" in o.log and "re-forming the job with the 2 healthy node(s)" in o.log
        (again,) = o.reports  # the first check exited to restart; the check ran again in the new job
        assert sorted(n.pod for n in again.nodes) == sorted(h.pod for h in healthy)
        assert {n.pod: n.hosts_rendezvous for n in again.nodes} == {"sim-node-0": True, "sim-node-2": False}
