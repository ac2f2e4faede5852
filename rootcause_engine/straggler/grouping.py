"""Which nodes benchmark together in each round (pure; DLRover's pairing, odd counts handled).

Round 1 pairs nodes in rank order: {0,1}, {2,3}, ... Later rounds pair the fastest with the slowest
of the round before. Communication is shared within a group, so a node with a slow link makes its
whole group slow; pairing it in round 2 with a *different*, fast partner shows which of the two it
was (the partner's time recovers, its own does not). With an odd count the last node joins a
group (a group of 3) rather than running alone: a lone node has no link to measure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Group = tuple[int, ...]


def first_round_groups(num_nodes: int) -> list[Group]:
    """Rank-order pairs; with an odd count the last pair takes the odd node (a group of 3)."""
    if num_nodes < 2:
        raise ValueError(f"the straggler check groups at least 2 nodes, got {num_nodes}")
    groups = [(i, i + 1) for i in range(0, num_nodes - 1, 2)]
    if num_nodes % 2:
        groups[-1] = (*groups[-1], num_nodes - 1)
    return groups


def next_round_groups(times: Mapping[int, float], previous: Sequence[Sequence[Group]]) -> list[Group]:
    """Pair the i-th fastest with the i-th slowest of ``times`` (node -> time of the round before).

    Ties sort by node rank, so every worker computes the same groups. With an odd count the median
    node joins the group of the fastest and the slowest. A group that would repeat one already run
    (two nodes that shared a group before) is broken by swapping with a neighbouring group where
    that is possible, because a repeated pair tells nothing new.
    """
    order = sorted(times, key=lambda node: (times[node], node))
    n = len(order)
    if n < 2:
        raise ValueError(f"the straggler check groups at least 2 nodes, got {n}")
    groups: list[list[int]] = [[order[i], order[n - 1 - i]] for i in range(n // 2)]
    if n % 2:
        groups[0].append(order[n // 2])
    seen = {frozenset(pair) for rnd in previous for group in rnd for pair in _pairs(group)}
    _break_repeats(groups, seen)
    return [tuple(sorted(group)) for group in groups]


def _pairs(group: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for i, a in enumerate(group) for b in group[i + 1 :]]


def _repeats(group: Sequence[int], seen: set[frozenset[int]]) -> int:
    return sum(frozenset(pair) in seen for pair in _pairs(group))


def _break_repeats(groups: list[list[int]], seen: set[frozenset[int]]) -> None:
    """Swap members between groups while that lowers the number of repeated pairs (deterministic).

    Not always to zero: with 5 nodes ({0,1}, {2,3,4} in round 1) every group of 3 repeats a pair,
    but every node still gets a partner it has not had, which is what localizing a link needs.
    """
    improved = True
    while improved:
        improved = False
        for i, group in enumerate(groups):
            if not _repeats(group, seen):
                continue
            # nearest groups first: their nodes have the closest times, so the swap keeps the
            # fastest-with-slowest pairing as intact as it can
            for j in sorted(range(len(groups)), key=lambda k: (abs(k - i), k)):
                other = groups[j]
                if j == i:
                    continue
                before = _repeats(group, seen) + _repeats(other, seen)
                for a in range(len(group)):
                    for b in range(len(other)):
                        group[a], other[b] = other[b], group[a]
                        if _repeats(group, seen) + _repeats(other, seen) < before:
                            improved = True
                            break
                        group[a], other[b] = other[b], group[a]
                    if improved:
                        break
                if improved:
                    break
            if improved:
                break


def partners(groups: Sequence[Group]) -> dict[int, Group]:
    """node -> the group it is in (for the report)."""
    return {node: group for group in groups for node in group}


def network_localizable(rounds: Sequence[Sequence[Group]]) -> bool:
    """Whether these rounds can single out a node with a slow link.

    Needs more than one group in a round (else every node shares every link time) and some node
    seen with a different partner in another round (else a slow pair cannot be split).
    """
    if not rounds or all(len(groups) < 2 for groups in rounds):
        return False
    distinct = {frozenset(g) for groups in rounds for g in groups}
    return len(distinct) > len(rounds[0])
