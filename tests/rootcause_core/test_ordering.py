"""The shared root-cause rule (rootcause_core.ordering): pure, total, deterministic."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given
from hypothesis import strategies as st

from rootcause_core.ordering import Role, order_failures, pick_root_cause, root_cause_key


@dataclasses.dataclass(frozen=True)
class F:
    role: Role
    timestamp_ns: int | None
    global_rank: int | None = None
    worker: str = ""
    source: str = ""


def test_candidate_beats_an_earlier_victim() -> None:
    victim = F(Role.VICTIM, 1_000)
    cause = F(Role.CANDIDATE, 5_000)
    assert order_failures([victim, cause]) == [cause, victim]


def test_earliest_candidate_wins_at_nanosecond_resolution() -> None:
    later = F(Role.CANDIDATE, 1_700_000_000_000_000_001, global_rank=0)
    earlier = F(Role.CANDIDATE, 1_700_000_000_000_000_000, global_rank=7)
    assert pick_root_cause([later, earlier]) is earlier


def test_missing_time_sorts_after_every_timed_failure_not_as_epoch() -> None:
    untimed = F(Role.CANDIDATE, None, global_rank=0)
    timed = F(Role.CANDIDATE, 9_999_999_999_999_999_999, global_rank=5)
    assert order_failures([untimed, timed]) == [timed, untimed]


def test_ties_break_by_rank_then_worker_then_source() -> None:
    t = 42
    by_source = [F(Role.CANDIDATE, t, 1, "pod-a", "error-b.pb"), F(Role.CANDIDATE, t, 1, "pod-a", "error-a.pb")]
    assert [f.source for f in order_failures(by_source)] == ["error-a.pb", "error-b.pb"]
    by_worker = [F(Role.CANDIDATE, t, 1, "pod-b"), F(Role.CANDIDATE, t, 1, "pod-a")]
    assert [f.worker for f in order_failures(by_worker)] == ["pod-a", "pod-b"]
    by_rank = [F(Role.CANDIDATE, t, None), F(Role.CANDIDATE, t, 3), F(Role.CANDIDATE, t, 2)]
    assert [f.global_rank for f in order_failures(by_rank)] == [2, 3, None]


def test_no_failures_gives_no_root_cause() -> None:
    assert pick_root_cause([]) is None
    assert order_failures([]) == []


failure_strategy = st.builds(
    F,
    role=st.sampled_from(list(Role)),
    timestamp_ns=st.none() | st.integers(min_value=0, max_value=2**63),
    global_rank=st.none() | st.integers(min_value=0, max_value=4096),
    worker=st.text(max_size=8),
    source=st.text(max_size=8),
)


@given(st.lists(failure_strategy, max_size=6))
def test_same_inputs_in_any_order_give_the_same_answer(failures: list[F]) -> None:
    expected = order_failures(failures)
    for permutation in itertools.islice(itertools.permutations(failures), 24):
        assert order_failures(permutation) == expected


@given(st.lists(failure_strategy, min_size=1, max_size=12))
def test_root_cause_is_a_candidate_whenever_one_exists(failures: list[F]) -> None:
    root = pick_root_cause(failures)
    assert root is not None
    if any(f.role == Role.CANDIDATE for f in failures):
        assert root.role == Role.CANDIDATE
    assert all(root_cause_key(root) <= root_cause_key(f) for f in failures)
