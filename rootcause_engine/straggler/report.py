"""``StragglerReport``: the check's result, as task output, log table and Deck source.

Plain dataclasses of ints, floats, strings and lists, so flytekit's dataclass transformer stores it
as a task output (shown as JSON in the console) without a custom type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rootcause_engine.straggler.decision import FAILED, OK, NodeDecision, NodeTimes
from rootcause_engine.straggler.samples import WorkerIdentity


@dataclass
class NodeResult:
    """One node: its groups and times per round (median trial; trials: max over its local workers),
    every trial's time (so a benchmark can re-run the decision on them), scores and verdict."""

    node_rank: int
    pod: str
    host: str
    local_workers: int
    groups: list[list[int]] = field(default_factory=list)
    compute_s: list[float | None] = field(default_factory=list)
    comm_s: list[float | None] = field(default_factory=list)
    compute_trials_s: list[list[float] | None] = field(default_factory=list)
    comm_trials_s: list[list[float] | None] = field(default_factory=list)
    best_compute_s: float | None = None
    best_comm_s: float | None = None
    compute_score: float | None = None
    comm_score: float | None = None
    verdict: str = OK
    error: str = ""
    hosts_rendezvous: bool | None = None

    def describe(self) -> str:
        """``pod 'x' (node rank 3)``: how errors and logs name a node."""
        return f"pod {self.pod!r} (node rank {self.node_rank})"


@dataclass
class StragglerReport:
    """Result of one straggler check: per-node results and the thresholds and workload used."""

    nodes: list[NodeResult] = field(default_factory=list)
    threshold: float = 0.0
    network_threshold: float = 0.0
    compute_threshold_applied: float = 0.0  # ``threshold``, or higher where the measured noise was
    network_threshold_applied: float = 0.0
    min_excess_s: float = 0.0
    rounds: int = 0
    round_groups: list[list[list[int]]] = field(default_factory=list)
    action: str = ""
    device: str = ""
    backend: str = ""
    dtype: str = ""
    matmul_size: int = 0
    allreduce_numel: int = 0
    network_localizable: bool = False
    wall_time_s: float = 0.0
    skipped: str = ""

    @property
    def stragglers(self) -> list[NodeResult]:
        """Nodes judged slow (compute or network), in node-rank order."""
        return [n for n in self.nodes if n.verdict not in (OK, FAILED)]

    @property
    def failed(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.verdict == FAILED]

    @property
    def flagged(self) -> list[NodeResult]:
        """Nodes that are not ``ok`` (slow or failed): what ``fail`` and ``exclude`` act on."""
        return [n for n in self.nodes if n.verdict != OK]

    def failure_message(self, reason: str = "") -> str:
        """What ``action='fail'`` says, on either front-end: every flagged node (pod, node rank,
        verdict), the table, and what to do."""
        flagged = ", ".join(f"{n.describe()} is {n.verdict}" for n in self.flagged)
        return "\n".join(
            [
                f"Straggler check failed before training started: {flagged}" + (f" ({reason})." if reason else "."),
                self.table(),
                "Cordon or replace the slow nodes and run again, or set StragglerCheck(action='warn') to train anyway.",
            ]
        )

    def summary(self) -> str:
        """One line for logs and error messages."""
        if self.skipped:
            return f"straggler check skipped: {self.skipped}"
        named = ", ".join(f"{n.describe()} {n.verdict}" for n in self.flagged)
        verdict = named if named else f"all {len(self.nodes)} nodes ok"
        return f"straggler check: {verdict} ({self.thresholds()})"

    def thresholds(self) -> str:
        """The thresholds applied, and the configured ones where the measured noise raised them."""
        parts = []
        for name, configured, applied in (
            ("compute", self.threshold, self.compute_threshold_applied),
            ("network", self.network_threshold, self.network_threshold_applied),
        ):
            raised = f" (raised by noise from {configured:g}x)" if applied > configured else ""
            parts.append(f"{name} {max(applied, configured):.3g}x{raised}")
        return "thresholds: " + ", ".join(parts) + " the median of the other nodes, in every round"

    def table(self) -> str:
        """A short fixed-width table: one row per node."""
        if self.skipped:
            return self.summary()
        header = ("node", "pod", "compute s (per round)", "comm s (per round)", "cmp x", "net x", "verdict")
        rows = [header]
        for n in self.nodes:
            rows.append(
                (
                    str(n.node_rank),
                    n.pod,
                    " ".join(_ms(v) for v in n.compute_s),
                    " ".join(_ms(v) for v in n.comm_s),
                    _score(n.compute_score),
                    _score(n.comm_score),
                    n.verdict,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        return "\n".join([self.summary(), *lines])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def build_nodes(
    identities: Sequence[WorkerIdentity],
    times: Sequence[NodeTimes],
    decisions: Sequence[NodeDecision],
    round_groups: Sequence[Sequence[Sequence[int]]],
) -> list[NodeResult]:
    """Join identities, measurements and verdicts into one ``NodeResult`` per node (pure)."""
    by_node: dict[int, list[WorkerIdentity]] = {}
    for ident in identities:
        by_node.setdefault(ident.node_rank, []).append(ident)
    decided = {d.node_rank: d for d in decisions}
    results = []
    for t in sorted(times, key=lambda t: t.node_rank):
        workers = sorted(by_node.get(t.node_rank, []), key=lambda i: i.local_rank)
        lead = workers[0] if workers else None
        d = decided[t.node_rank]
        results.append(
            NodeResult(
                node_rank=t.node_rank,
                pod=lead.pod if lead else "?",
                host=lead.host if lead else "?",
                local_workers=len(workers),
                groups=[list(_group_of(t.node_rank, groups)) for groups in round_groups],
                compute_s=list(t.round_compute_s),
                comm_s=list(t.round_comm_s),
                compute_trials_s=[None if v is None else list(v) for v in t.compute_s],
                comm_trials_s=[None if v is None else list(v) for v in t.comm_s],
                best_compute_s=t.best_compute_s,
                best_comm_s=t.best_comm_s,
                compute_score=d.compute_score,
                comm_score=d.comm_score,
                verdict=d.verdict,
                error=t.error,
                hosts_rendezvous=lead.hosts_rendezvous if lead else None,
            )
        )
    return results


def _group_of(node: int, groups: Sequence[Sequence[int]]) -> Sequence[int]:
    for group in groups:
        if node in group:
            return group
    return ()


def report_from_dict(data: dict[str, Any]) -> StragglerReport:
    """The report ``dataclasses.asdict`` made ``data`` of (a saved benchmark run, a worker's file)."""
    fields = dict(data)
    nodes = [NodeResult(**n) for n in fields.pop("nodes")]
    return StragglerReport(nodes=nodes, **fields)
