"""Benchmark of the straggler pre-check on simulated nodes under CPU load (run by hand; prints a table).

    .venv/bin/python benchmarks/straggler.py [--nodes 3 4 6] [--load 2] [--runs 150] [--slow-runs 20]
        [--first-checks 50] [--save runs.json] | --replay runs.json [--threshold 1.3]

For each node count, ONE simulated cluster (one torch elastic agent process per node, c10d on
127.0.0.1, gloo, one CPU worker per node, all on this machine's cores) runs ``runs`` homogeneous
checks and then ``slow-runs`` checks with one node given a simulated device 1.5x slower
(``simulate.slow_device``; a different node each time), back to back, with default settings.
``--first-checks N`` also launches N fresh clusters per node count, each running one homogeneous
check with spawned workers (kfpytorch's default start method) right after its rendezvous: the
check a task runs, on processes that have just started (cold caches, lazy initialisation, the other
nodes' start-up still competing for the CPU). ``--load N`` starts N busy processes (pure-Python spin
loops) that compete for the CPU for the whole measurement, and stops them at the end; they run on
any CPU.
``--cpus`` (default ``0``) pins every simulated node to the same CPU(s), so that equal nodes have
equal hardware: on the 2-vCPU development VM a vCPU computes the same trial in 28 ms of CPU time or
in 40 ms, depending on the host's other work, for seconds at a time and not the same on both vCPUs
(measured: two processes pinned one per vCPU); a node placed on the slower vCPU for a whole check
*is* ~1.4x slower, and the check is right to say so, which says nothing about false positives.

MEASURED: every check's verdicts, its per-trial times, and its wall time (rank 0, from the first
collective to the verdict; agent start-up and rendezvous are not included).
COUNTED: false-positive runs (a homogeneous check that flagged any node, or a slow-node check that
flagged a node other than the slow one) and detections (the slow node flagged). The margins: the
highest compute score of a healthy node against the lowest of a slowed one, and the healthy link
score nearest the network bar its check applied (``score/bar``; the verdict needs it above 1).
``--save`` writes every report; ``--replay`` re-runs the pure decision (``decision.decide``) on the
saved per-trial times, e.g. with another ``--threshold``, without measuring again.
``--resample N`` (with ``--replay``) also decides N synthetic checks per node count, each node drawn
at random from the measured nodes of the same node count (homogeneous runs; for the slow-node
checks one node from the slowed nodes of the slow runs): more runs than can be measured, from
measured samples. A drawn node keeps its trial times *relative to its own check* (each trial
divided by the median of the other nodes' same trial in that check), so what the check cancels by
lining trials up (load that changed between checks) is cancelled here too, while each node's own
scatter, and any persistent unfairness it suffered, stays in. Times are then ratios, so
``min_excess_s`` is not applied (which only makes flagging easier).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rootcause_engine.straggler.decision import OK, Decision, NodeTimes, decide
from rootcause_engine.straggler.report import NodeResult, StragglerReport, report_from_dict
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_harness.flytekit.straggler_cluster import AgentOutcome, SimulatedCluster, pod_name_of, run_cluster

SLOW_FACTOR = 1.5


@dataclass
class Run:
    """One measured check: its report, and which pod was slowed (None: homogeneous)."""

    nodes: int
    load: int
    slow_pod: str | None
    report: StragglerReport
    first: bool = False  # the first check after a fresh launch (else one of a back-to-back series)


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy spin loops competing for the CPU while the block runs (stopped after)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.wait()


def measure(nodes: int, load: int, runs: int, slow_runs: int, cpus: frozenset[int] | None = None) -> list[Run]:
    """One cluster of ``nodes`` running ``runs`` homogeneous then ``slow_runs`` slow-node checks."""
    slow = [(i * 7 + 1) % nodes for i in range(slow_runs)]
    schedule = tuple([{}] * runs + [{idx: SLOW_FACTOR} for idx in slow])
    cluster = SimulatedCluster(nodes=nodes, check=StragglerCheck(), schedule=schedule, cpus=cpus)
    with cpu_load(load), tempfile.TemporaryDirectory(prefix="straggler-bench-") as tmp:
        outcomes = _succeeded(run_cluster(cluster, Path(tmp), timeout_s=3600), f"{nodes} nodes")
    reports = outcomes[0].reports  # every worker holds the same (broadcast) report
    pods: list[str | None] = [None] * runs + [pod_name_of(i) for i in slow]
    return [Run(nodes, load, pod, report) for pod, report in zip(pods, reports, strict=True)]


def _succeeded(outcomes: list[AgentOutcome], what: str) -> list[AgentOutcome]:
    """``outcomes`` if every agent exited 0; else the benchmark stops with the first failed one's log."""
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        sys.exit(f"{what}: agent {failed[0].pod} exited {failed[0].returncode}:\n{failed[0].log[-4000:]}")
    return outcomes


def first_checks(nodes: int, load: int, launches: int, cpus: frozenset[int] | None = None) -> list[Run]:
    """``launches`` fresh clusters of ``nodes``, one homogeneous check each, spawned workers."""
    runs = []
    cluster = SimulatedCluster(nodes=nodes, check=StragglerCheck(), cpus=cpus, start_method="spawn")
    with cpu_load(load), tempfile.TemporaryDirectory(prefix="straggler-bench-first-") as tmp:
        for launch in range(launches):
            outcomes = _succeeded(run_cluster(cluster, Path(tmp) / str(launch), timeout_s=900),
                                  f"{nodes} nodes, launch {launch}")
            (report,) = outcomes[0].reports
            runs.append(Run(nodes, load, None, report, first=True))
    return runs


def node_times(node: NodeResult, rank: int | None = None) -> NodeTimes:
    """A reported node's per-trial times as the decision's input (optionally under another rank)."""
    return NodeTimes(
        node.node_rank if rank is None else rank,
        tuple(None if t is None else tuple(t) for t in node.compute_trials_s),
        tuple(None if t is None else tuple(t) for t in node.comm_trials_s),
        node.error,
    )


def redecide(report: StragglerReport, threshold: float) -> Decision:
    """The pure decision run again on the report's per-trial times, with compute ``threshold``."""
    return decide([node_times(n) for n in report.nodes], threshold, report.min_excess_s, report.network_threshold)


def relative(report: StragglerReport) -> list[NodeResult]:
    """The report's nodes with every trial divided by the median of the other nodes' same trial."""

    def scaled(trials: list[list[float] | None], others: list[list[list[float] | None]]) -> list[list[float] | None]:
        out: list[list[float] | None] = []
        for r, mine in enumerate(trials):
            peers = [o[r] for o in others]
            if mine is None or any(p is None for p in peers):
                out.append(None)
                continue
            out.append([t / statistics.median(p[k] for p in peers if p) for k, t in enumerate(mine)])
        return out

    nodes = []
    for n in report.nodes:
        rest = [o for o in report.nodes if o is not n]
        nodes.append(
            dataclasses.replace(
                n,
                compute_trials_s=scaled(n.compute_trials_s, [o.compute_trials_s for o in rest]),
                comm_trials_s=scaled(n.comm_trials_s, [o.comm_trials_s for o in rest]),
            )
        )
    return nodes


def resampled(runs: list[Run], count: int, threshold: float, seed: int = 0) -> str:
    """``count`` synthetic homogeneous and slow-node checks per (nodes, load), from measured nodes."""
    rng = random.Random(seed)
    lines = [f"{'nodes':>5} {'load':>4} {'runs':>5} {'FP runs':>8} {'1.5x found':>11}  (resampled from measured nodes)"]
    for key in sorted({(r.nodes, r.load) for r in runs}):
        cell = [r for r in runs if (r.nodes, r.load) == key]
        healthy = [n for r in cell if r.slow_pod is None for n in relative(r.report)]
        slowed = [n for r in cell for n in relative(r.report) if n.pod == r.slow_pod]
        fp = found = 0
        for _ in range(count):
            drawn = [node_times(n, i) for i, n in enumerate(rng.sample(healthy, key[0]))]
            decision = decide(drawn, threshold, 0.0, cell[0].report.network_threshold)
            fp += any(d.verdict != OK for d in decision.nodes)
        for _ in range(count if slowed else 0):
            drawn = [node_times(rng.choice(slowed), 0)]
            drawn += [node_times(n, i + 1) for i, n in enumerate(rng.sample(healthy, key[0] - 1))]
            decision = decide(drawn, threshold, 0.0, cell[0].report.network_threshold)
            flagged = {d.node_rank for d in decision.nodes if d.verdict != OK}
            found += 0 in flagged
            fp += bool(flagged - {0})
        lines.append(f"{key[0]:>5} {key[1]:>4} {count:>5} {fp:>8} {f'{found}/{count if slowed else 0}':>11}")
    return "\n".join(lines)


def table(runs: list[Run], threshold: float | None) -> str:
    """One row per (nodes, load): runs, false-positive runs, detection at 1.5x, check wall time."""
    header = (
        f"{'nodes':>5} {'load':>4} {'runs':>5} {'first':>5} {'FP runs':>8} {'FP first':>8} {'1.5x found':>11} "
        f"{'check s median':>15} {'max':>6} {'top healthy score':>18} {'lowest slow score':>18} "
        f"{'top healthy link score/bar':>27}"
    )
    lines = [header]
    for key in sorted({(r.nodes, r.load) for r in runs}):
        cell = [r for r in runs if (r.nodes, r.load) == key]
        fp = fp_first = found = slowed = 0
        healthy_top, slow_low = 0.0, float("inf")
        link_top, link_bar = 0.0, float("inf")  # the healthy link score nearest its check's bar
        for r in cell:
            decision = redecide(r.report, threshold or r.report.threshold)
            pods = {n.node_rank: n.pod for n in r.report.nodes}
            for d in decision.nodes:
                if pods[d.node_rank] != r.slow_pod and (d.comm_score or 0.0) / decision.network_threshold > (
                    link_top / link_bar
                ):
                    link_top, link_bar = d.comm_score or 0.0, decision.network_threshold
            if threshold is None:  # what the check itself decided
                flagged = {n.pod for n in r.report.nodes if n.verdict != OK}
            else:
                flagged = {pods[d.node_rank] for d in decision.nodes if d.verdict != OK}
            fp += bool(flagged - {r.slow_pod})
            fp_first += r.first and bool(flagged)
            if r.slow_pod is not None:
                slowed += 1
                found += r.slow_pod in flagged
            for n in r.report.nodes:
                if n.pod == r.slow_pod:
                    slow_low = min(slow_low, n.compute_score or 0.0)
                else:
                    healthy_top = max(healthy_top, n.compute_score or 0.0)
        walls = [r.report.wall_time_s for r in cell]
        lines.append(
            f"{key[0]:>5} {key[1]:>4} {len(cell):>5} {sum(r.first for r in cell):>5} {fp:>8} {fp_first:>8} "
            f"{f'{found}/{slowed}':>11} "
            f"{statistics.median(walls):>15.2f} {max(walls):>6.2f} {healthy_top:>18.2f} {slow_low:>18.2f} "
            f"{f'{link_top:.2f}/{link_bar:.2f}':>27}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 4, 6])
    parser.add_argument("--load", type=int, default=2, help="busy processes competing for the CPU")
    parser.add_argument("--runs", type=int, default=150, help="homogeneous checks back to back per node count")
    parser.add_argument("--first-checks", type=int, default=50,
                        help="fresh launches per node count, each one homogeneous check (spawned workers)")
    parser.add_argument("--slow-runs", type=int, default=20, help=f"checks with one node {SLOW_FACTOR}x slow")
    parser.add_argument("--save", type=Path, help="write every measured report here (JSON)")
    parser.add_argument("--replay", type=Path, help="decide again on the reports saved by --save; measure nothing")
    parser.add_argument("--threshold", type=float, help="with --replay: compute threshold to decide with")
    parser.add_argument("--resample", type=int, default=0, help="with --replay: synthetic checks per node count")
    parser.add_argument(
        "--cpus", default="0",
        help="CPUs every simulated node runs on, comma-separated (default 0: the same hardware for all nodes); "
        "'any' leaves placement to the scheduler",
    )
    args = parser.parse_args(argv)
    cpus = None if args.cpus == "any" else frozenset(int(c) for c in args.cpus.split(","))
    if args.replay:
        saved = json.loads(args.replay.read_text())
        runs = [Run(r["nodes"], r["load"], r["slow_pod"], report_from_dict(r["report"]), r.get("first", False))
                for r in saved]
        threshold = args.threshold or StragglerCheck().threshold
        print(table(runs, threshold))
        if args.resample:
            print(resampled(runs, args.resample, threshold))
        return
    runs = []
    for n in args.nodes:
        started = time.perf_counter()
        runs += first_checks(n, args.load, args.first_checks, cpus)
        print(f"{n} nodes: {args.first_checks} first checks in {time.perf_counter() - started:.0f} s", flush=True)
        if args.save:
            args.save.write_text(json.dumps([dataclasses.asdict(r) for r in runs]))
        started = time.perf_counter()
        runs += measure(n, args.load, args.runs, args.slow_runs, cpus)
        print(f"{n} nodes: {args.runs + args.slow_runs} checks in {time.perf_counter() - started:.0f} s", flush=True)
        if args.save:
            args.save.write_text(json.dumps([dataclasses.asdict(r) for r in runs]))
    print(table(runs, None))


if __name__ == "__main__":
    main()
