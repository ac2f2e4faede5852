"""What each worker sends to rank 0, and how rank 0 folds workers into nodes (pure).

A node computes as slow as its slowest local worker: in data-parallel training every step waits
for the last worker of the job, so one slow GPU in a node makes that node (and the job) slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rootcause_engine.straggler.decision import NodeTimes, Trials


@dataclass(frozen=True)
class WorkerIdentity:
    """Where a worker runs: gathered once, so rank 0 can name pods and map nodes to global ranks."""

    rank: int
    local_rank: int
    node_rank: int
    pod: str
    host: str
    hosts_rendezvous: bool | None = None  # this pod's agent runs the rendezvous store (None: unknown)


@dataclass(frozen=True)
class WorkerSample:
    """One worker's trial times for one round (None: the step raised or timed out, see ``error``)."""

    rank: int
    node_rank: int
    round_index: int
    compute_s: Trials | None
    comm_s: Trials | None
    error: str = ""


def ranks_by_node(identities: Iterable[WorkerIdentity]) -> dict[int, list[int]]:
    """node rank -> sorted global ranks of its workers."""
    nodes: dict[int, list[int]] = {}
    for ident in identities:
        nodes.setdefault(ident.node_rank, []).append(ident.rank)
    return {node: sorted(ranks) for node, ranks in sorted(nodes.items())}


def aggregate(
    node_ranks: Sequence[int], samples: Iterable[WorkerSample], round_groups: Sequence[Sequence[Sequence[int]]]
) -> list[NodeTimes]:
    """Per node and round, trial by trial: compute is the max over the node's local workers (it is
    local, and trial ``k`` ran on all of them at once); the communication time is its group's, the
    *min* over every rank of the group, because a collective ends for all its ranks at once (they
    start lined up), so a rank that saw it take longer was itself held up (preempted, paged out) and
    the shortest view is the link's. Any worker's error marks its node failed.
    """
    rounds = len(round_groups)
    compute: dict[int, list[list[Trials | None]]] = {n: [[] for _ in range(rounds)] for n in node_ranks}
    comm: dict[int, list[list[Trials | None]]] = {n: [[] for _ in range(rounds)] for n in node_ranks}
    errors: dict[int, list[str]] = {n: [] for n in node_ranks}
    for s in samples:
        if s.round_index >= rounds:
            continue
        compute[s.node_rank][s.round_index].append(s.compute_s)
        comm[s.node_rank][s.round_index].append(s.comm_s)
        if s.error:
            errors[s.node_rank].append(f"rank {s.rank}, round {s.round_index + 1}: {s.error}")
    group_comm: dict[int, list[Trials | None]] = {n: [None] * rounds for n in node_ranks}
    for r, groups in enumerate(round_groups):
        for group in groups:
            seen = [v for node in group for v in comm[node][r] if v]  # any member's view will do
            for node in group:
                group_comm[node][r] = _per_trial(min, seen)
    return [
        NodeTimes(
            node_rank=n,
            compute_s=tuple(_per_trial(max, v) for v in compute[n]),
            comm_s=tuple(group_comm[n]),
            error="; ".join(errors[n]),
        )
        for n in node_ranks
    ]


def round_times(nodes: Iterable[NodeTimes], round_index: int) -> dict[int, float]:
    """node -> its median communication trial in ``round_index`` (what the next round's pairing sorts by).

    Communication is what pairing can localize (compute is local and needs no partner); a node that
    was not measured sorts as the slowest, so it is paired with the fastest node next.
    """
    times = {}
    for n in nodes:
        value = n.round_comm_s[round_index]
        times[n.node_rank] = float("inf") if value is None else value
    return times


def _per_trial(pick: Callable[[Iterable[float]], float], views: list[Trials | None]) -> Trials | None:
    """Trial ``k`` of several workers folded into one (``max`` or ``min``); None if any is missing."""
    if not views or any(not v for v in views):
        return None
    count = min(len(v) for v in views if v)
    return tuple(pick(v[k] for v in views if v) for k in range(count))
