"""``StragglerReport`` (``rootcause_engine/straggler/report.py``): who is flagged, the summary, table and
failure message, the join of identities, times and verdicts into node results, and the dict round trip."""

from __future__ import annotations

import dataclasses
import json

from rootcause_engine.straggler.decision import FAILED, OK, SLOW_COMPUTE, SLOW_NETWORK, NodeDecision, NodeTimes
from rootcause_engine.straggler.report import NodeResult, StragglerReport, build_nodes, report_from_dict
from rootcause_engine.straggler.samples import WorkerIdentity
from tests.rootcause_engine.straggler.made_reports import report


def test_table_has_one_row_per_node_and_the_verdicts() -> None:
    lines = report("ok", "slow-compute").table().splitlines()
    assert "pod 'pod-1' (node rank 1) slow-compute" in lines[0]
    assert len(lines) == 4 and lines[3].split()[-1] == "slow-compute"
    assert "skipped" in StragglerReport(skipped="1 node(s)").table()


def test_stragglers_failed_and_flagged_split_the_verdicts() -> None:
    rep = report(OK, SLOW_NETWORK, FAILED, SLOW_COMPUTE)
    assert [n.node_rank for n in rep.stragglers] == [1, 3]
    assert [n.node_rank for n in rep.failed] == [2]
    assert [n.node_rank for n in rep.flagged] == [1, 2, 3]
    assert report(OK, OK).flagged == []


def test_summary_names_the_flagged_nodes_or_says_all_are_ok() -> None:
    assert report(OK, OK, OK).summary() == (
        "straggler check: all 3 nodes ok (thresholds: compute 1.3x, network 1.5x the median of the other nodes, "
        "in every round)"
    )
    flagged = report(OK, SLOW_COMPUTE, FAILED).summary()
    assert flagged.startswith("straggler check: pod 'pod-1' (node rank 1) slow-compute, pod 'pod-2' (node rank 2) ")
    assert StragglerReport(skipped="1 node(s)").summary() == "straggler check skipped: 1 node(s)"


def test_thresholds_say_where_the_measured_noise_raised_them() -> None:
    rep = report(OK, OK)
    rep.compute_threshold_applied, rep.network_threshold_applied = 1.874, 1.2
    assert rep.thresholds() == (
        "thresholds: compute 1.87x (raised by noise from 1.3x), network 1.5x the median of the other nodes, "
        "in every round"
    )


def test_the_table_shows_a_dash_for_what_was_not_measured() -> None:
    rep = StragglerReport(nodes=[NodeResult(0, "pod-0", "h", 1, compute_s=[None, 0.5], comm_s=[0.25, None])])
    header, row = rep.table().splitlines()[1:]
    assert header.split()[:2] == ["node", "pod"]
    assert row.split() == ["0", "pod-0", "-", "0.5000", "0.2500", "-", "-", "-", "ok"]


def test_the_failure_message_names_each_flagged_node_the_reason_and_what_to_do() -> None:
    rep = report(OK, SLOW_COMPUTE, FAILED, OK)
    first, *table, advice = rep.failure_message("too few nodes left").splitlines()
    assert first == (
        "Straggler check failed before training started: pod 'pod-1' (node rank 1) is slow-compute, "
        "pod 'pod-2' (node rank 2) is failed (too few nodes left)."
    )
    assert "\n".join(table) == rep.table()
    assert "set StragglerCheck(action='warn') to train anyway" in advice
    assert rep.failure_message().splitlines()[0].endswith("pod 'pod-2' (node rank 2) is failed.")


def test_build_nodes_joins_identities_times_and_verdicts_per_node() -> None:
    identities = [
        WorkerIdentity(rank=3, local_rank=1, node_rank=1, pod="pod-b", host="host-b2"),
        WorkerIdentity(rank=2, local_rank=0, node_rank=1, pod="pod-b", host="host-b", hosts_rendezvous=True),
        WorkerIdentity(rank=0, local_rank=0, node_rank=0, pod="pod-a", host="host-a", hosts_rendezvous=False),
    ]
    times = [
        NodeTimes(1, ((2.0, 4.0, 3.0), (3.0,)), ((0.5,), None), error="rank 3, round 2: reset"),
        NodeTimes(0, ((1.0,), (1.0,)), ((0.5,), (0.4,))),
    ]
    decisions = [NodeDecision(0, OK, 1.0, 1.0, 1.0, 0.5), NodeDecision(1, FAILED, None, None, None, None)]
    a, b = build_nodes(identities, times, decisions, [[(0, 1)], [(0,), (1,)]])
    assert (a.node_rank, a.pod, a.host, a.local_workers, a.hosts_rendezvous) == (0, "pod-a", "host-a", 1, False)
    # the node's lead is its local rank 0, whatever order the identities came in
    assert (b.node_rank, b.pod, b.host, b.local_workers, b.hosts_rendezvous) == (1, "pod-b", "host-b", 2, True)
    assert b.groups == [[0, 1], [1]]
    assert b.compute_s == [3.0, 3.0] and b.comm_s == [0.5, None]
    assert b.compute_trials_s == [[2.0, 4.0, 3.0], [3.0]] and b.comm_trials_s == [[0.5], None]
    assert (b.best_compute_s, b.best_comm_s) == (3.0, 0.5)
    assert (b.verdict, b.error, b.compute_score) == (FAILED, "rank 3, round 2: reset", None)
    assert (a.compute_score, a.comm_score, a.verdict) == (1.0, 1.0, OK)


def test_a_node_without_identities_is_named_unknown() -> None:
    decision = NodeDecision(4, OK, 1.0, 1.0, 1.0, 1.0)
    (result,) = build_nodes([], [NodeTimes(4, ((1.0,),), ((1.0,),))], [decision], [[(5,)]])
    assert (result.pod, result.host, result.local_workers, result.hosts_rendezvous) == ("?", "?", 0, None)
    assert result.groups == [[]]  # in no group of the round


def test_a_report_comes_back_whole_from_its_dict_even_through_json() -> None:
    rep = report(OK, SLOW_NETWORK, FAILED, SLOW_COMPUTE, action="fail")
    rep.round_groups = [[[0, 1], [2, 3]], [[0, 3], [1, 2]]]
    rep.nodes[0].compute_trials_s = [[0.01, 0.02], None]
    assert report_from_dict(dataclasses.asdict(rep)) == rep
    assert report_from_dict(json.loads(json.dumps(dataclasses.asdict(rep)))) == rep
