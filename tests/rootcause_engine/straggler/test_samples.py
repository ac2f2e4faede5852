"""How rank 0 folds the workers' samples into node times (``rootcause_engine/straggler/samples.py``), pure."""

from __future__ import annotations

import math

from rootcause_engine.straggler.decision import NodeTimes
from rootcause_engine.straggler.samples import WorkerIdentity, WorkerSample, aggregate, ranks_by_node, round_times


def test_a_node_computes_as_slow_as_its_slowest_local_worker() -> None:
    samples = [
        WorkerSample(0, 0, 0, (1.0, 3.0), (1.0,)),
        WorkerSample(1, 0, 0, (2.5, 1.0), (1.0,)),  # trial by trial: the slower of node 0's workers
        WorkerSample(2, 1, 0, (1.0, 1.0), (1.0,)),
        WorkerSample(3, 1, 0, (1.1, 0.9), (1.0,)),
    ]
    times = aggregate([0, 1], samples, [[(0, 1)]])
    assert [t.compute_s for t in times] == [((2.5, 3.0),), ((1.1, 1.0),)]


def test_a_groups_link_time_is_the_shortest_view_of_its_members() -> None:
    # both ranks ran the same collectives; rank 1 was preempted after the last one and saw longer
    samples = [WorkerSample(0, 0, 0, (1.0,), (0.5, 0.7)), WorkerSample(1, 1, 0, (1.0,), (0.9, 0.6))]
    times = aggregate([0, 1], samples, [[(0, 1)]])
    assert [t.comm_s for t in times] == [((0.5, 0.6),), ((0.5, 0.6),)]


def test_an_error_on_any_local_worker_fails_the_node() -> None:
    samples = [
        WorkerSample(0, 0, 0, (1.0,), (1.0,)),
        WorkerSample(1, 0, 0, None, (1.0,), error="compute step raised RuntimeError: CUDA error"),
        WorkerSample(2, 1, 0, (1.0,), (1.0,)),
    ]
    times = aggregate([0, 1], samples, [[(0, 1)]])
    assert times[0].failed and "rank 1, round 1: compute step raised" in times[0].error
    assert not times[1].failed


def test_ranks_by_node_sorts_nodes_and_their_ranks() -> None:
    identities = [
        WorkerIdentity(rank=5, local_rank=1, node_rank=2, pod="c", host="h"),
        WorkerIdentity(rank=0, local_rank=0, node_rank=0, pod="a", host="h"),
        WorkerIdentity(rank=4, local_rank=0, node_rank=2, pod="c", host="h"),
        WorkerIdentity(rank=1, local_rank=1, node_rank=0, pod="a", host="h"),
    ]
    nodes = ranks_by_node(identities)
    assert nodes == {0: [0, 1], 2: [4, 5]} and list(nodes) == [0, 2]
    assert ranks_by_node([]) == {}


def test_every_error_of_a_node_is_kept_with_its_rank_and_round() -> None:
    samples = [
        WorkerSample(0, 0, 0, (1.0,), (1.0,), error="compute step took over 5.0 s (0/5 trials)"),
        WorkerSample(0, 0, 1, (1.0,), None, error="communication step raised RuntimeError: reset"),
        WorkerSample(1, 1, 0, (1.0,), (1.0,)),
        WorkerSample(1, 1, 1, (1.0,), (1.0,)),
    ]
    node0, _ = aggregate([0, 1], samples, [[(0, 1)], [(0, 1)]])
    assert node0.error == (
        "rank 0, round 1: compute step took over 5.0 s (0/5 trials); "
        "rank 0, round 2: communication step raised RuntimeError: reset"
    )


def test_a_missing_compute_view_leaves_the_round_unmeasured_a_missing_link_view_does_not() -> None:
    samples = [
        WorkerSample(0, 0, 0, (1.0, 1.0), (0.2, 0.2)),
        WorkerSample(1, 0, 0, None, (0.2, 0.2), error="compute step raised"),
        WorkerSample(2, 1, 0, (1.0, 1.0), None, error="communication step raised"),
        WorkerSample(3, 1, 0, (1.0, 1.0), (0.3, 0.3)),
    ]
    node0, node1 = aggregate([0, 1], samples, [[(0,), (1,)]])
    assert node0.compute_s == (None,)  # one local worker's trials are missing: the node's max is unknown
    assert node0.comm_s == ((0.2, 0.2),)
    assert node1.compute_s == ((1.0, 1.0),)
    assert node1.comm_s == ((0.3, 0.3),)  # a group's link time: any member's view will do
    assert node1.failed  # the error still fails the node
    (alone,) = aggregate([0], [WorkerSample(0, 0, 0, (1.0,), None, error="communication step raised")], [[(0,)]])
    assert alone.comm_s == (None,)  # no member saw the link


def test_a_node_that_sent_nothing_has_no_times() -> None:
    times = aggregate([0, 1], [WorkerSample(0, 0, 0, (1.0,), (1.0,))], [[(0, 1)]])
    assert times[1] == NodeTimes(node_rank=1, compute_s=(None,), comm_s=((1.0,),), error="")
    assert times[1].failed


def test_trials_are_folded_up_to_the_shortest_worker_s_count() -> None:
    samples = [WorkerSample(0, 0, 0, (1.0, 2.0, 3.0), (1.0,)), WorkerSample(1, 0, 0, (0.5, 4.0), (1.0,))]
    (node0,) = aggregate([0], samples, [[(0,)]])
    assert node0.compute_s == ((1.0, 4.0),)


def test_a_group_of_three_shares_the_shortest_view_and_each_round_its_own_groups() -> None:
    samples = [
        WorkerSample(0, 0, 0, (1.0,), (0.4,)),
        WorkerSample(1, 1, 0, (1.0,), (0.3,)),
        WorkerSample(2, 2, 0, (1.0,), (0.5,)),
        WorkerSample(0, 0, 1, (1.0,), (0.9,)),
        WorkerSample(1, 1, 1, (1.0,), (0.8,)),
        WorkerSample(2, 2, 1, (1.0,), (0.1,)),
    ]
    times = aggregate([0, 1, 2], samples, [[(0, 1, 2)], [(0, 1), (2,)]])
    assert [t.comm_s for t in times] == [((0.3,), (0.8,)), ((0.3,), (0.8,)), ((0.3,), (0.1,))]


def test_samples_of_a_round_beyond_the_groups_are_ignored() -> None:
    samples = [WorkerSample(0, 0, 0, (1.0,), (1.0,)), WorkerSample(0, 0, 1, (9.0,), (9.0,), error="late")]
    (node0,) = aggregate([0], samples, [[(0,)]])
    assert node0.compute_s == ((1.0,),) and node0.error == ""


def test_round_times_are_median_link_times_and_an_unmeasured_node_sorts_last() -> None:
    nodes = [
        NodeTimes(0, ((1.0,), (1.0,)), ((0.1, 0.3, 0.2), (0.5,))),
        NodeTimes(3, ((1.0,), (1.0,)), (None, (0.7,)), error="communication step raised"),
    ]
    assert round_times(nodes, 0) == {0: 0.2, 3: math.inf}
    assert round_times(nodes, 1) == {0: 0.5, 3: 0.7}
