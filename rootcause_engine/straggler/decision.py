"""The verdict rule (pure): which nodes are slow, and at what. Every node's times are noisy on a
shared host or cluster, and a straggler drags an all-node median towards itself. So each trial of a
node is compared with the median of the *other* nodes' same trial. A node is slow only when it is
slower in most trials, in every round, and above a bar that rises with the measured noise.
``docs/straggler.md`` says how the score, the threshold and the network verdict are made.
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
#: the configured one. The score is a median over every trial of every round, steadier than one
#: trial, so fewer widths than a single trial would need; chosen on measured checks under load
#: (``benchmarks/straggler.py --replay``: 4.0 with a per-round minimum missed 1 in 4 slow nodes at
#: 3 nodes; 2.5 with the pooled score kept every healthy node below it).
NOISE_FACTOR = 2.5
#: The same for communication scores. Measured under load on healthy simulated links
#: (``benchmarks/straggler.py``, 4 and 6 nodes, two busy processes): a healthy node's link score
#: reached 3.1 noise widths (``ln(score) / noise``) in both rounds, where compute stays under the
#: 2.5 above; with 2.5 such a node was flagged ``slow-network`` (score 2.07 against the configured
#: 2.0). With 5 the bar on a quiet fabric (noise under 0.14) is still the configured threshold.
NETWORK_NOISE_FACTOR = 5.0
#: Each round's median ratio must clear this share of the way from 1 to the threshold applied
#: (with 1.3: 1.15), so a node slow in one round only is never flagged however slow it was there.
ROUND_FLOOR_SHARE = 0.5
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
    """A node's verdict and the numbers behind it (scores: median trial ratio over every round, see module doc)."""

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
    """One quantity (compute or communication) scored for every healthy node (log space inside)."""

    scores: dict[int, float]  # node -> median trial ratio over every round (not in log space)
    weakest_round: dict[int, float]  # node -> its lowest round median ratio (not in log space)
    references: dict[int, float]  # node -> median of the other nodes' medians, in its best round
    excess: dict[int, float]  # node -> its best round median minus that reference (seconds)
    noise: float  # log-space spread (see module doc)


def _score(per_node: Mapping[int, Sequence[Trials]]) -> _Scored:
    rounds = min(len(r) for r in per_node.values())
    log_ratios: dict[int, list[list[float]]] = {n: [] for n in per_node}
    trial_spreads: list[float] = []
    for r in range(rounds):
        trials = {n: per_node[n][r] for n in per_node}
        for n in per_node:
            ratios = [math.log(x) for x in trial_ratios(trials, n)]
            if not ratios:
                continue
            log_ratios[n].append(ratios)
            trial_spreads.append(_MAD_TO_SIGMA * _mad(ratios))
    scores = {
        n: math.exp(statistics.median([x for rr in per_round for x in rr]))
        for n, per_round in log_ratios.items()
        if per_round
    }
    weakest = {n: math.exp(min(statistics.median(rr) for rr in log_ratios[n])) for n in scores}
    noise = statistics.median(trial_spreads) if trial_spreads else 0.0
    medians = {n: [statistics.median(t) for t in per_node[n][:rounds]] for n in per_node}
    references, excess = {}, {}
    for n in scores:
        best_round = min(range(rounds), key=lambda r: medians[n][r])
        reference = leave_one_out_median({m: medians[m][best_round] for m in medians}, n)
        if reference is not None:
            references[n] = reference
            excess[n] = medians[n][best_round] - reference
    return _Scored(scores, weakest, references, excess, noise)


def applied_threshold(configured: float, noise: float, factor: float = NOISE_FACTOR) -> float:
    """The configured threshold, raised where ``factor`` times the measured noise would otherwise reach it."""
    return max(configured, math.exp(factor * noise))


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
    network_bar = applied_threshold(
        threshold if network_threshold is None else network_threshold, comm.noise, NETWORK_NOISE_FACTOR
    )
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
    """Slower than ``threshold`` over all trials, clearly slower in every round, and by ``min_excess_s``."""
    score = scored.scores.get(node)
    if score is None or node not in scored.excess:
        return False
    round_floor = 1.0 + ROUND_FLOOR_SHARE * (threshold - 1.0)
    return score > threshold and scored.weakest_round[node] > round_floor and scored.excess[node] > min_excess_s
