"""The verdict rule (pure): which nodes are slow, and at what.

Input: per node and round, the times of several trials. Compute trials are *lined up*: trial ``k``
ran on every node at the same time (a barrier starts each), so whatever else the host or cluster
did during trial ``k`` (a burst of other work, a scheduler hiccup) hit every node's trial ``k``.

**Round score** (per node, per round): for each trial ``k`` the node's time divided by the median of
the *other* nodes' trial ``k`` (leave-one-out median), then the median of those ratios over the
trials. Pairing by trial cancels what all nodes suffered together; the median means a node must be
slower than the others in a majority of trials, so a few preempted trials cannot make a straggler.

**Node score**: the *lowest* of its round scores, so a node is slow only if it was slow in every
round. That is DLRover's two-round idea: a slow device or link is slow in both rounds, a
transient (or a partner with a slow link, see ``grouping.py``) in one at most.

**Threshold**: ``max(threshold, exp(NOISE_FACTOR x noise))``, where ``noise`` is the measured
spread of the round scores (in log space, so 1.2x slower and 1.2x faster are the same distance):
the typical trial-to-trial spread of a node's ratios (1.4826 x their median absolute deviation,
the median over nodes and rounds, so a minority of odd nodes does not set it). Not divided by
the square root of the number of trials as for independent samples: what disturbs a trial (a busy
core, a neighbour's burst, a congested link) tends to last several trials. On a quiet, homogeneous
cluster the configured
threshold applies; on a noisy one the bar rises with the noise instead of flagging healthy nodes
(the report shows the threshold applied). A node is also only slow when its median trial exceeds
the reference by ``min_excess_s`` (an absolute floor for tiny workloads).

Why leave-one-out and not DLRover's median of all nodes: DLRover flags a node slower than 2x the
median of all nodes. With two nodes that can never fire: the median is the mean of the two, and
``t_slow > 2 * (t_slow + t_fast) / 2`` would need ``t_fast < 0``. More generally, a straggler drags
the all-node median towards itself. Leaving the node out makes its reference the typical *other*
node: with two nodes simply the other node (1.5x slower scores 1.5, its peer 0.67, so at most one of
two is flagged for a threshold > 1); with many nodes the plain median, robust to a minority.

Communication is shared within a group, so with fewer than 4 nodes (one group every round) every
node sees the same link time and no node can be singled out for its network: ``slow-network``
then never fires, and the report says the network was not localizable.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

OK = "ok"
SLOW_COMPUTE = "slow-compute"
SLOW_NETWORK = "slow-network"
FAILED = "failed"
VERDICTS = (OK, SLOW_COMPUTE, SLOW_NETWORK, FAILED)

#: How many noise widths (log space) a node's score must clear before the threshold rises above
#: the configured one. Chosen from measured homogeneous runs (see ``benchmarks/straggler.py``).
NOISE_FACTOR = 4.0
#: A normal distribution's standard deviation is 1.4826 x its median absolute deviation.
_MAD_TO_SIGMA = 1.4826

#: One node's trial times in one round (None: that round was not measured).
Trials = tuple[float, ...]


@dataclass(frozen=True)
class NodeTimes:
    """One node's measurements: per round, its trial times (None: not measured, see ``error``)."""

    node_rank: int
    compute_s: tuple[Trials | None, ...]
    comm_s: tuple[Trials | None, ...]
    error: str = ""

    @property
    def round_compute_s(self) -> tuple[float | None, ...]:
        """Median trial per round (what the table shows)."""
        return tuple(_median(t) for t in self.compute_s)

    @property
    def round_comm_s(self) -> tuple[float | None, ...]:
        return tuple(_median(t) for t in self.comm_s)

    @property
    def best_compute_s(self) -> float | None:
        return _min(self.round_compute_s)

    @property
    def best_comm_s(self) -> float | None:
        return _min(self.round_comm_s)

    @property
    def failed(self) -> bool:
        return bool(self.error) or any(not t for t in (*self.compute_s, *self.comm_s))


@dataclass(frozen=True)
class NodeDecision:
    """A node's verdict and the numbers behind it (scores: lowest round score, see module doc)."""

    node_rank: int
    verdict: str
    compute_score: float | None
    comm_score: float | None
    compute_reference_s: float | None
    comm_reference_s: float | None


@dataclass(frozen=True)
class Decision:
    """Every node's verdict plus the thresholds actually applied (configured, or raised by noise)."""

    nodes: list[NodeDecision]
    compute_threshold: float
    network_threshold: float


def _median(values: Sequence[float] | None) -> float | None:
    return statistics.median(values) if values else None


def _min(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return min(measured) if measured else None


def leave_one_out_median(values: Mapping[int, float], node: int) -> float | None:
    """Median of every value but ``node``'s (None when no other value exists)."""
    others = [v for k, v in values.items() if k != node]
    return statistics.median(others) if others else None


def trial_ratios(trials: Mapping[int, Trials], node: int) -> list[float]:
    """Per trial ``k``: ``node``'s time over the median of the other nodes' trial ``k``."""
    others = [t for k, t in trials.items() if k != node]
    if not others:
        return []
    count = min(len(t) for t in trials.values())
    return [trials[node][k] / statistics.median(t[k] for t in others) for k in range(count)]


def _mad(values: Sequence[float]) -> float:
    center = statistics.median(values)
    return statistics.median(abs(v - center) for v in values)


@dataclass(frozen=True)
class _Scored:
    """One quantity (compute or communication) scored for every healthy node."""

    scores: dict[int, float]  # node -> lowest round score
    references: dict[int, float]  # node -> median of the other nodes' medians, in its best round
    excess: dict[int, float]  # node -> its best round median minus that reference (seconds)
    noise: float  # log-space spread (see module doc)


def _score(per_node: Mapping[int, Sequence[Trials]]) -> _Scored:
    rounds = min(len(r) for r in per_node.values())
    log_scores: dict[int, list[float]] = {n: [] for n in per_node}
    trial_spreads: list[float] = []
    for r in range(rounds):
        trials = {n: per_node[n][r] for n in per_node}
        for n in per_node:
            ratios = [math.log(x) for x in trial_ratios(trials, n)]
            if not ratios:
                continue
            log_scores[n].append(statistics.median(ratios))
            trial_spreads.append(_MAD_TO_SIGMA * _mad(ratios))
    scores = {n: math.exp(min(s)) for n, s in log_scores.items() if s}
    noise = statistics.median(trial_spreads) if trial_spreads else 0.0
    medians = {n: [statistics.median(t) for t in per_node[n][:rounds]] for n in per_node}
    references, excess = {}, {}
    for n in scores:
        best_round = min(range(rounds), key=lambda r: medians[n][r])
        reference = leave_one_out_median({m: medians[m][best_round] for m in medians}, n)
        if reference is not None:
            references[n] = reference
            excess[n] = medians[n][best_round] - reference
    return _Scored(scores, references, excess, noise)


def applied_threshold(configured: float, noise: float) -> float:
    """The configured threshold, raised where the measured noise would otherwise reach it."""
    return max(configured, math.exp(NOISE_FACTOR * noise))


def decide(
    nodes: Sequence[NodeTimes], threshold: float, min_excess_s: float, network_threshold: float | None = None
) -> Decision:
    """Verdict per node, in node-rank order: ``failed`` > ``slow-compute`` > ``slow-network`` > ``ok``.

    Failed nodes are left out of every reference, so a crashed node does not make others look slow.
    ``network_threshold`` (default: ``threshold``) applies to communication times.
    """
    healthy = [n for n in nodes if not n.failed]
    compute = _score({n.node_rank: n.compute_s for n in healthy})  # type: ignore[misc]
    comm = _score({n.node_rank: n.comm_s for n in healthy})  # type: ignore[misc]
    compute_bar = applied_threshold(threshold, compute.noise)
    network_bar = applied_threshold(threshold if network_threshold is None else network_threshold, comm.noise)
    decisions = []
    for node in sorted(nodes, key=lambda n: n.node_rank):
        rank = node.node_rank
        if node.failed:
            decisions.append(NodeDecision(rank, FAILED, None, None, None, None))
            continue
        if _is_slow(compute, rank, compute_bar, min_excess_s):
            verdict = SLOW_COMPUTE
        elif _is_slow(comm, rank, network_bar, min_excess_s):
            verdict = SLOW_NETWORK
        else:
            verdict = OK
        decisions.append(
            NodeDecision(
                rank,
                verdict,
                compute.scores.get(rank),
                comm.scores.get(rank),
                compute.references.get(rank),
                comm.references.get(rank),
            )
        )
    return Decision(decisions, compute_bar, network_bar)


def _is_slow(scored: _Scored, node: int, threshold: float, min_excess_s: float) -> bool:
    """Slower than ``threshold`` in every round (by the median trial) and by at least ``min_excess_s``."""
    score = scored.scores.get(node)
    if score is None or node not in scored.excess:
        return False
    return score > threshold and scored.excess[node] > min_excess_s
