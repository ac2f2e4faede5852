"""The verdict rule (pure): which nodes are slow, and at what.

Each node keeps its best (smallest) time over the rounds, separately for compute and for
communication, as DLRover does: a transient hiccup in one round is forgiven, a slow node is slow in
every round, and a node whose round-1 partner had a slow link recovers in round 2.

Reference: the median of the *other* nodes' best times (leave-one-out median), not the median of
all nodes. DLRover flags a node slower than 2x the median of all nodes. With two nodes that can
never fire: the median is the mean of the two, and ``t_slow > 2 * (t_slow + t_fast) / 2`` would need
``t_fast < 0``. More generally, a straggler drags the all-node median towards itself, so the rule
gets blinder the fewer nodes there are. Leaving the node out makes its reference the typical
*other* node: with two nodes it is simply the other node, so a node 1.5x slower than its only peer
scores 1.5 (and the peer 0.67, so at most one of two nodes can ever be flagged for a threshold > 1);
with many nodes it is the plain median, robust to a minority of stragglers. A node is slow when
``best > threshold * reference`` and ``best - reference > min_excess_s`` (an absolute floor, so a
tiny workload's sub-millisecond jitter is not a verdict).

Communication is shared within a group, so with fewer than 4 nodes (one group every round) every
node sees the same link time and no node can be singled out for its network: ``slow-network``
then never fires, and the report says the network was not localizable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

OK = "ok"
SLOW_COMPUTE = "slow-compute"
SLOW_NETWORK = "slow-network"
FAILED = "failed"
VERDICTS = (OK, SLOW_COMPUTE, SLOW_NETWORK, FAILED)


@dataclass(frozen=True)
class NodeTimes:
    """One node's measurements: per round, the max over its local workers (None: not measured)."""

    node_rank: int
    compute_s: tuple[float | None, ...]
    comm_s: tuple[float | None, ...]
    error: str = ""

    @property
    def best_compute_s(self) -> float | None:
        return _best(self.compute_s)

    @property
    def best_comm_s(self) -> float | None:
        return _best(self.comm_s)

    @property
    def failed(self) -> bool:
        return bool(self.error) or self.best_compute_s is None or self.best_comm_s is None


@dataclass(frozen=True)
class NodeDecision:
    """A node's verdict and the numbers behind it (scores are best time / reference)."""

    node_rank: int
    verdict: str
    compute_score: float | None
    comm_score: float | None
    compute_reference_s: float | None
    comm_reference_s: float | None


def _best(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return min(measured) if measured else None


def leave_one_out_median(values: dict[int, float], node: int) -> float | None:
    """Median of every value but ``node``'s (None when no other value exists)."""
    others = [v for k, v in values.items() if k != node]
    return statistics.median(others) if others else None


def is_slow(best: float, reference: float | None, threshold: float, min_excess_s: float) -> bool:
    """The rule for one quantity: slower than ``threshold`` x reference and by at least ``min_excess_s``."""
    if reference is None:
        return False
    return best > threshold * reference and best - reference > min_excess_s


def decide(
    nodes: Sequence[NodeTimes], threshold: float, min_excess_s: float, network_threshold: float | None = None
) -> list[NodeDecision]:
    """Verdict per node, in node-rank order: ``failed`` > ``slow-compute`` > ``slow-network`` > ``ok``.

    Failed nodes are left out of every reference, so a crashed node does not make others look slow.
    ``network_threshold`` (default: ``threshold``) applies to communication times.
    """
    net_threshold = threshold if network_threshold is None else network_threshold
    healthy = [n for n in nodes if not n.failed]
    compute = {n.node_rank: n.best_compute_s for n in healthy}
    comm = {n.node_rank: n.best_comm_s for n in healthy}
    decisions = []
    for node in sorted(nodes, key=lambda n: n.node_rank):
        if node.failed:
            decisions.append(NodeDecision(node.node_rank, FAILED, None, None, None, None))
            continue
        best_compute, best_comm = compute[node.node_rank], comm[node.node_rank]
        ref_compute = leave_one_out_median(compute, node.node_rank)  # type: ignore[arg-type]
        ref_comm = leave_one_out_median(comm, node.node_rank)  # type: ignore[arg-type]
        if is_slow(best_compute, ref_compute, threshold, min_excess_s):  # type: ignore[arg-type]
            verdict = SLOW_COMPUTE
        elif is_slow(best_comm, ref_comm, net_threshold, min_excess_s):  # type: ignore[arg-type]
            verdict = SLOW_NETWORK
        else:
            verdict = OK
        decisions.append(
            NodeDecision(
                node.node_rank,
                verdict,
                _ratio(best_compute, ref_compute),
                _ratio(best_comm, ref_comm),
                ref_compute,
                ref_comm,
            )
        )
    return decisions


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return value / reference
