"""Straggler reports made for the tests (each node's figures fixed, its verdict given): the shared input of the
action, page, report and settings tests."""

from __future__ import annotations

from rootcause_engine.straggler.report import NodeResult, StragglerReport


def node(rank: int, verdict: str = "ok") -> NodeResult:
    return NodeResult(
        node_rank=rank,
        pod=f"pod-{rank}",
        host=f"host-{rank}",
        local_workers=2,
        groups=[[0, 1], [rank, 3 - rank]],
        compute_s=[0.01, 0.011],
        comm_s=[0.002, None],
        best_compute_s=0.01,
        best_comm_s=0.002,
        compute_score=2.0 if verdict == "slow-compute" else 1.0,
        comm_score=1.0,
        verdict=verdict,
        hosts_rendezvous=False,
    )


def report(*verdicts: str, action: str = "warn") -> StragglerReport:
    return StragglerReport(
        nodes=[node(i, v) for i, v in enumerate(verdicts)],
        threshold=1.3,
        network_threshold=1.5,
        rounds=2,
        action=action,
        network_localizable=len(verdicts) >= 4,
    )
