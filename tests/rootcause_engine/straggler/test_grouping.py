"""Pure tests of the pairing rounds (DLRover's design, odd counts, no repeated pairs)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rootcause_engine.straggler.grouping import (
    first_round_groups,
    network_localizable,
    next_round_groups,
)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (2, [(0, 1)]),
        (3, [(0, 1, 2)]),
        (4, [(0, 1), (2, 3)]),
        (5, [(0, 1), (2, 3, 4)]),
        (6, [(0, 1), (2, 3), (4, 5)]),
        (7, [(0, 1), (2, 3), (4, 5, 6)]),
        (8, [(0, 1), (2, 3), (4, 5), (6, 7)]),
        (9, [(0, 1), (2, 3), (4, 5), (6, 7, 8)]),
    ],
)
def test_first_round_pairs_in_rank_order_and_the_odd_node_joins_the_last_pair(n: int, expected: list) -> None:
    assert first_round_groups(n) == expected


def test_one_node_cannot_be_grouped() -> None:
    with pytest.raises(ValueError, match="at least 2 nodes"):
        first_round_groups(1)


def test_second_round_pairs_fastest_with_slowest() -> None:
    times = {0: 1.0, 1: 1.0, 2: 3.0, 3: 3.0, 4: 2.0, 5: 2.0}
    groups = next_round_groups(times, [first_round_groups(6)])
    # fastest (0) with slowest (3) and 1 with 2; 4 with 5 would repeat round 1's {4,5}, so the
    # neighbouring pair (1, 2) trades members with it
    assert (0, 3) in groups
    assert sorted(groups) == [(0, 3), (1, 5), (2, 4)]


def test_second_round_breaks_a_pair_that_would_repeat() -> None:
    # sorted: 1, 2, 3, 0 -> pairs (1,0) and (2,3); (2,3) repeats round 1 and must be broken
    times = {0: 4.0, 1: 1.0, 2: 2.0, 3: 3.0}
    groups = next_round_groups(times, [[(0, 1), (2, 3)]])
    assert {frozenset(g) for g in groups}.isdisjoint({frozenset((0, 1)), frozenset((2, 3))})


def test_the_median_node_joins_the_fastest_and_slowest_with_an_odd_count() -> None:
    times = {0: 1.0, 1: 5.0, 2: 3.0, 3: 2.0, 4: 4.0}
    groups = next_round_groups(times, [first_round_groups(5)])
    assert sorted(len(g) for g in groups) == [2, 3]
    assert 2 in next(g for g in groups if len(g) == 3)  # node 2 is the median


def test_ties_sort_by_node_rank_so_every_worker_computes_the_same_groups() -> None:
    times = dict.fromkeys(range(6), 1.0)
    assert next_round_groups(times, [first_round_groups(6)]) == next_round_groups(
        dict(reversed(times.items())), [first_round_groups(6)]
    )


@given(
    n=st.integers(min_value=2, max_value=9),
    data=st.data(),
)
def test_every_round_is_a_partition_into_groups_of_two_or_three(n: int, data: st.DataObject) -> None:
    times = {i: data.draw(st.floats(min_value=0.001, max_value=1.0)) for i in range(n)}
    first = first_round_groups(n)
    second = next_round_groups(times, [first])
    for groups in (first, second):
        members = sorted(node for g in groups for node in g)
        assert members == list(range(n))
        assert all(len(g) in (2, 3) for g in groups)
        assert sum(len(g) == 3 for g in groups) == n % 2
    if n >= 4:  # every node gets a partner it has not had: the two rounds can split a slow pair
        first_of = {node: set(g) for g in first for node in g}
        for g in second:
            assert all(set(g) - first_of[node] for node in g), (first, second)
    if n >= 4 and n != 5:  # and no pair repeats (with 5 nodes any group of 3 must repeat one)
        seen = {frozenset((a, b)) for g in first for a in g for b in g if a < b}
        for g in second:
            assert not any(frozenset((a, b)) in seen for a in g for b in g if a < b), (first, second)


@pytest.mark.parametrize(("n", "localizable"), [(2, False), (3, False), (4, True), (5, True), (9, True)])
def test_a_slow_link_is_localizable_only_from_four_nodes(n: int, localizable: bool) -> None:
    first = first_round_groups(n)
    second = next_round_groups({i: float(i) for i in range(n)}, [first])
    assert network_localizable([first, second]) is localizable
    assert network_localizable([first]) is False
