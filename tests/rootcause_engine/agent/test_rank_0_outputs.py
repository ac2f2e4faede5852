"""The wait of a pod without rank 0 for rank 0's outputs: the loop and its message, on a fake clock."""

from __future__ import annotations

import pytest

from rootcause_core.testimony import Member
from rootcause_engine.agent.rank_0_outputs import (
    MAX_POLL_INTERVAL_S,
    POLL_INTERVAL_S,
    UNKNOWN_RANK_0_POD,
    MissingRank0Outputs,
    Rank0Outcome,
    Rank0Wait,
    missing_outputs,
    wait_for_rank_0_outputs,
)

TIMEOUT_S = 120.0
PREFIX = "s3://bucket/run/data/0"


class FakeTime:
    """A clock that only the loop's sleeps move, and a record of them."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds

    def after(self, seconds: float) -> bool:
        """A look that finds its file once ``seconds`` passed."""
        return self.now - 1000.0 >= seconds


def _wait(time: FakeTime, outputs: object, error: object = lambda: False) -> Rank0Wait:
    return wait_for_rank_0_outputs(
        outputs, error, timeout_s=TIMEOUT_S, clock=time.clock, sleep=time.sleep  # type: ignore[arg-type]
    )


def test_outputs_already_written_end_the_wait_at_the_first_look() -> None:
    time = FakeTime()
    wait = _wait(time, lambda: True)
    assert (wait.outcome, wait.waited_s, wait.looks, time.sleeps) == (Rank0Outcome.OUTPUTS, 0.0, 1, [])


def test_outputs_that_appear_later_end_the_wait_soon_after_with_pauses_that_grow_to_the_cap() -> None:
    time = FakeTime()
    wait = _wait(time, lambda: time.after(30.0))
    assert wait.outcome == Rank0Outcome.OUTPUTS
    assert 30.0 <= wait.waited_s <= 30.0 + MAX_POLL_INTERVAL_S
    assert time.sleeps[0] == POLL_INTERVAL_S
    assert time.sleeps == sorted(time.sleeps) and max(time.sleeps) == MAX_POLL_INTERVAL_S


def test_an_error_document_ends_the_wait_it_is_the_job_s_answer() -> None:
    time = FakeTime()
    wait = _wait(time, lambda: False, lambda: time.after(3.0))
    assert wait.outcome == Rank0Outcome.ERROR and 3.0 <= wait.waited_s < 3.0 + MAX_POLL_INTERVAL_S


def test_the_bound_passes_with_neither_after_one_last_look_at_the_bound() -> None:
    time = FakeTime()
    looked_at: list[float] = []

    def outputs() -> bool:
        looked_at.append(time.now - 1000.0)
        return False

    wait = _wait(time, outputs)
    assert wait.outcome == Rank0Outcome.NEITHER and wait.waited_s == pytest.approx(TIMEOUT_S)
    assert looked_at[0] == 0.0 and looked_at[-1] == pytest.approx(TIMEOUT_S) and wait.looks == len(looked_at)
    assert sum(time.sleeps) == pytest.approx(TIMEOUT_S)


def test_a_look_the_store_fails_counts_as_not_yet_and_is_told_if_the_bound_passes() -> None:
    time = FakeTime()
    answers = iter([OSError("503 Slow Down"), False, True])

    def outputs() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert _wait(time, outputs).outcome == Rank0Outcome.OUTPUTS

    def failing() -> bool:
        raise OSError("503 Slow Down")

    wait = _wait(FakeTime(), failing)
    assert wait.outcome == Rank0Outcome.NEITHER and wait.last_look_error == "OSError: 503 Slow Down"


MEMBERS = (Member(0, "train-worker-0", 0, 2), Member(1, "train-worker-1", 2, 2, hosts_store=True))


@pytest.mark.parametrize("outcome", [Rank0Outcome.OUTPUTS, Rank0Outcome.ERROR])
def test_a_wait_that_found_a_file_owes_no_error(outcome: Rank0Outcome) -> None:
    assert missing_outputs(Rank0Wait(outcome, 1.5, 4), output_prefix=PREFIX, worker="train-worker-1",
                           members=MEMBERS) is None


def test_the_error_names_rank_0_s_pod_this_pod_s_ranks_where_it_looked_and_how_long() -> None:
    wait = Rank0Wait(Rank0Outcome.NEITHER, 120.2, 70, last_look_error="OSError: 503 Slow Down")
    missing = missing_outputs(wait, output_prefix=PREFIX, worker="train-worker-1", members=MEMBERS)
    assert missing == MissingRank0Outputs(wait, PREFIX, "train-worker-1", range(2, 4), "train-worker-0")
    message = missing.message
    assert f"{UNKNOWN_RANK_0_POD} (train-worker-0) wrote neither outputs.pb nor an error document" in message
    assert f"under {PREFIX}: this pod waited 120 s" in message
    assert "This pod (train-worker-1, global ranks 2-3)" in message
    assert "rank_0_outputs_timeout_s" in message and "OSError: 503 Slow Down" in message


def test_without_the_peers_membership_the_error_says_the_pod_holding_global_rank_0() -> None:
    missing = missing_outputs(Rank0Wait(Rank0Outcome.NEITHER, 120.0, 70), output_prefix=PREFIX,
                              worker="train-worker-1", members=())
    assert missing is not None and missing.rank_0_worker is None
    assert f"but {UNKNOWN_RANK_0_POD} wrote neither" in missing.message
    assert "This pod (train-worker-1, its global ranks unknown)" in missing.message
    assert "store's last error" not in missing.message
