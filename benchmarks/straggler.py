"""Benchmark of the straggler pre-check on simulated nodes (run by hand; prints a table).

    .venv/bin/python benchmarks/straggler.py [--nodes 4 6 8] [--runs 10]

For each node count, ONE simulated cluster (one torch elastic agent process per node, c10d on
127.0.0.1, gloo, one CPU worker per node) runs ``3 x runs`` complete checks back to back:
``runs`` homogeneous, ``runs`` with one node slowed 1.5x and ``runs`` with one node slowed 2x
(a different node each time). Each check is a full check: own process group, both rounds,
verdicts on rank 0. A node is slowed with the test-only hook that makes its compute step
genuinely take 1.5x / 2x longer in wall time (it sleeps in proportion to its measured trial time).

MEASURED: the check's verdicts and its wall time (rank 0, from the first collective to the verdict;
agent start-up and rendezvous are printed separately as the launch time).
COMPUTED from the same measured per-node, per-round times (no extra benchmark runs):
* DLRover's rule: per node, matmul + allreduce time summed; round 1; round 2 only if round 1 has a
  suspect (> 2x the median of all nodes); a node is flagged if its best sum > 2x the median.
* bisection: halve the candidate set each round, keeping the half whose slowest member (a group
  is as slow as its slowest node) is slower; ceil(log2 n) rounds; the last node left is flagged if
  it passes our threshold. Counted: rounds; detection and false positives as for the others.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flytekitplugins_rootcause.straggler.decision import OK, leave_one_out_median
from flytekitplugins_rootcause.straggler.report import NodeResult, StragglerReport
from flytekitplugins_rootcause.straggler.settings import StragglerCheck
from flytekitplugins_rootcause.straggler.simulate import SimulatedCluster, pod_name_of, run_cluster

FACTORS = (1.0, 1.5, 2.0)


@dataclass
class Tally:
    """Outcomes of one rule over the runs of one (node count, slowdown) cell."""

    runs: int = 0
    detected: int = 0
    false_positive_runs: int = 0
    rounds: list[int] = field(default_factory=list)

    def add(self, flagged: set[str], slow_pod: str | None, rounds: int) -> None:
        self.runs += 1
        self.rounds.append(rounds)
        if slow_pod is not None and slow_pod in flagged:
            self.detected += 1
        if flagged - {slow_pod}:
            self.false_positive_runs += 1


def ours(report: StragglerReport) -> tuple[set[str], int]:
    return {n.pod for n in report.nodes if n.verdict != OK}, report.rounds


def dlrover(report: StragglerReport) -> tuple[set[str], int]:
    """DLRover's rule on our measured times: summed time, 2x the all-node median, round 2 if suspects."""

    def total(node: NodeResult, r: int) -> float:
        return node.compute_s[r] + node.comm_s[r]

    first = {n.pod: total(n, 0) for n in report.nodes}
    median = statistics.median(first.values())
    if not any(t > 2 * median for t in first.values()):
        return set(), 1
    best = {n.pod: min(total(n, 0), total(n, 1)) for n in report.nodes}
    median = statistics.median(best.values())
    return {p for p, t in best.items() if t > 2 * median}, 2


def bisection(report: StragglerReport) -> tuple[set[str], int]:
    """Halving search on the measured best compute times; the survivor is judged by our threshold."""
    best = {n.pod: n.best_compute_s for n in report.nodes}
    candidates = sorted(report.nodes, key=lambda n: n.node_rank)
    rounds = 0
    while len(candidates) > 1:
        rounds += 1
        half = len(candidates) // 2
        left, right = candidates[:half], candidates[half:]
        slow_left = max(best[n.pod] for n in left)
        slow_right = max(best[n.pod] for n in right)
        candidates = left if slow_left > slow_right else right
    survivor = candidates[0].pod
    reference = leave_one_out_median(best, survivor)
    flagged = {survivor} if reference and best[survivor] > report.threshold * reference else set()
    return flagged, rounds


RULES: dict[str, Callable[[StragglerReport], tuple[set[str], int]]] = {
    "ours (2 rounds, leave-one-out median)": ours,
    "DLRover (2x median of sums)": dlrover,
    "bisection": bisection,
}


def schedule_for(nodes: int, runs: int) -> list[tuple[float, int | None]]:
    """(factor, slowed pod index) per check: homogeneous, then 1.5x, then 2x, rotating the slow node."""
    plan: list[tuple[float, int | None]] = []
    for factor in FACTORS:
        for i in range(runs):
            plan.append((factor, None if factor == 1.0 else (i * 7 + 1) % nodes))
    return plan


def bench(
    nodes: int, runs: int, check: StragglerCheck, verbose: bool = False
) -> tuple[dict, list[float], float, tuple[float, float, dict[float, float]]]:
    plan = schedule_for(nodes, runs)
    cluster = SimulatedCluster(
        nodes=nodes,
        check=check,
        schedule=tuple({} if idx is None else {idx: factor} for factor, idx in plan),
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="straggler-bench-") as tmp:
        outcomes = run_cluster(cluster, Path(tmp), timeout_s=600)
    launch_s = time.perf_counter() - started
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        sys.exit(f"{nodes} nodes: agent {failed[0].pod} exited {failed[0].returncode}:\n{failed[0].log[-4000:]}")
    reports = [r for r in outcomes[0].reports]  # every worker holds the same (broadcast) report
    tallies = {(rule, f): Tally() for rule in RULES for f in FACTORS}
    # margins: highest score of a node that was NOT slowed (compute, network), lowest slowed score
    healthy_compute, healthy_network = 0.0, 0.0
    slowed_min = {f: float("inf") for f in FACTORS[1:]}
    for (factor, idx), report in zip(plan, reports, strict=True):
        slow_pod = None if idx is None else pod_name_of(idx)
        for rule, fn in RULES.items():
            flagged, rounds = fn(report)
            tallies[(rule, factor)].add(flagged, slow_pod, rounds)
        for n in report.nodes:
            if n.pod == slow_pod:
                slowed_min[factor] = min(slowed_min[factor], n.compute_score or 0.0)
            else:
                healthy_compute = max(healthy_compute, n.compute_score or 0.0)
            healthy_network = max(healthy_network, n.comm_score or 0.0)
        missed_or_extra = {n.pod for n in report.nodes if n.verdict != OK} != ({slow_pod} - {None})
        if verbose and missed_or_extra:
            print(f"-- {nodes} nodes, {slow_pod or 'no node'} slowed {factor}x:\n{report.table()}")
    return tallies, [r.wall_time_s for r in reports], launch_s, (healthy_compute, healthy_network, slowed_min)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[4, 6, 8])
    parser.add_argument("--runs", type=int, default=10, help="checks per slowdown factor and node count")
    parser.add_argument("--threshold", type=float, default=StragglerCheck().threshold)
    parser.add_argument("--verbose", action="store_true", help="print the report of every check that erred")
    args = parser.parse_args(argv)
    check = StragglerCheck(threshold=args.threshold)
    print(f"threshold {check.threshold}x, min excess {check.min_excess_s * 1000:g} ms, {args.runs} runs per cell")
    header = f"{'nodes':>5} {'slow':>5} {'rule':<38} {'detected':>9} {'FP runs':>8} {'rounds':>7}"
    lines = []
    for n in args.nodes:
        tallies, walls, launch_s, margins = bench(n, args.runs, check, args.verbose)
        lines.append(
            f"{n} nodes: check wall time median {statistics.median(walls):.2f} s, max {max(walls):.2f} s "
            f"({len(walls)} checks); whole launch incl. agent start-up {launch_s:.1f} s"
        )
        lines.append(
            f"{n} nodes: highest score of a node not slowed: compute {margins[0]:.2f}, network {margins[1]:.2f}; "
            "lowest compute score of a slowed node: " + ", ".join(f"{f}x -> {v:.2f}" for f, v in margins[2].items())
        )
        for factor in FACTORS:
            for rule in RULES:
                t = tallies[(rule, factor)]
                det = "-" if factor == 1.0 else f"{t.detected}/{t.runs}"
                rounds = statistics.mean(t.rounds)
                lines.append(
                    f"{n:>5} {factor:>4}x {rule:<38} {det:>9} {t.false_positive_runs:>4}/{t.runs:<3} {rounds:>7.1f}"
                )
        print("\n".join([header, *lines]), flush=True)
        lines = []
    print(f"(bisection needs ceil(log2 n) rounds: {', '.join(f'{n}->{math.ceil(math.log2(n))}' for n in args.nodes)})")


if __name__ == "__main__":
    main()
