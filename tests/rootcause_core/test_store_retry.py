"""The retry loop of store writes: its schedule, its deadline, and the shapes of errors it retries.

A fake clock stands in for time, so each schedule is exact and instant. The real clients' errors
(s3fs, gcsfs, botocore, requests, aiohttp, obstore) are checked where those clients are installed:
``tests/flytekitplugins_rootcause/entrypoint/test_error_upload_flaky_store.py``.
"""

from __future__ import annotations

import pytest

from rootcause_core import store_retry
from rootcause_core.store_retry import (
    Backoff,
    Deadline,
    GaveUp,
    call_with_retries,
    deadline_inside,
    is_transient_store_error,
    is_write_conflict,
)


class FakeClock:
    """Monotonic time that moves only when the loop sleeps (or a try says it took time)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class BotoLike(Exception):
    """botocore's ``ClientError`` as far as the classifier reads it: ``response``."""

    def __init__(self, code: str | None, status: int) -> None:
        error = {"Code": code} if code is not None else {}
        self.response = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}
        super().__init__(f"{code} ({status})")


def wrapped(cause: BaseException, kind: type[OSError] = OSError) -> OSError:
    """As s3fs raises a store's answer: its own ``OSError`` kind, botocore's error as the cause."""
    error = kind("translated")
    error.__cause__ = cause
    return error


class HttpErrorLike(Exception):
    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(f"status {code}")


class Failing:
    """An attempt that raises each of ``errors`` in turn (each try taking ``took_s`` of the clock's
    time, or the seconds it was given if fewer: a real try bounds its request by them), then returns
    the seconds it was given; ``given`` holds what each try was given."""

    def __init__(self, errors: list[BaseException], clock: FakeClock, took_s: float = 0.0) -> None:
        self.errors, self.clock, self.took_s = errors, clock, took_s
        self.given: list[float] = []

    def __call__(self, remaining_s: float) -> float:
        self.given.append(remaining_s)
        self.clock.now += min(self.took_s, remaining_s)
        if len(self.given) <= len(self.errors):
            raise self.errors[len(self.given) - 1]
        return remaining_s


def test_the_backoff_doubles_from_the_first_wait_to_the_cap_each_wait_in_its_upper_half() -> None:
    backoff = Backoff(first_s=0.2, max_s=5.0)
    assert [backoff.ceiling_s(n) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    for retry in range(1, 8):
        ceiling = backoff.ceiling_s(retry)
        assert backoff.wait_s(retry, draw=lambda: 0.0) == pytest.approx(ceiling / 2)
        assert backoff.wait_s(retry, draw=lambda: 0.999999) == pytest.approx(ceiling, rel=1e-5)
    assert backoff.ceiling_s(10_000) == 5.0  # no overflow for a very long run


def test_transient_errors_are_retried_with_the_schedule_until_a_try_works() -> None:
    clock = FakeClock()
    attempt = Failing([wrapped(BotoLike("SlowDown", 503)), HttpErrorLike(429), ConnectionResetError()], clock)
    result = call_with_retries(attempt, Deadline(60.0, clock), sleep=clock.sleep, draw=lambda: 1.0)
    assert clock.sleeps == [0.2, 0.4, 0.8]
    assert attempt.given == [60.0, pytest.approx(59.8), pytest.approx(59.4), pytest.approx(58.6)]
    assert result == pytest.approx(58.6)


def test_a_final_answer_is_not_retried() -> None:
    clock = FakeClock()
    missing = wrapped(BotoLike("NoSuchBucket", 404), FileNotFoundError)
    with pytest.raises(GaveUp) as caught:
        call_with_retries(Failing([missing], clock), Deadline(60.0, clock), sleep=clock.sleep)
    assert (caught.value.tries, caught.value.transient, clock.sleeps) == (1, False, [])
    assert caught.value.error is missing and caught.value.__cause__ is missing
    assert caught.value.summary() == "1 try in 0.0 s, not retried: the store's answer is final"


def test_a_store_that_keeps_failing_is_given_up_on_before_a_wait_would_pass_the_deadline() -> None:
    clock = FakeClock()
    unavailable = [wrapped(BotoLike("ServiceUnavailable", 503))] * 100
    with pytest.raises(GaveUp) as caught:
        call_with_retries(Failing(unavailable, clock, took_s=0.5), Deadline(10.0, clock), sleep=clock.sleep)
    gave_up = caught.value
    assert gave_up.transient and gave_up.tries == len(clock.sleeps) + 1
    assert clock.now - 100.0 <= 10.0  # never past the deadline
    assert gave_up.elapsed_s == pytest.approx(clock.now - 100.0)
    assert gave_up.summary().startswith(f"{gave_up.tries} tries in ")
    assert gave_up.summary().endswith("no time left for another try before the 10 s deadline")
    assert "ServiceUnavailable" not in gave_up.summary() and "translated" in str(gave_up)


def test_a_write_whose_turn_comes_after_the_deadline_is_not_tried() -> None:
    clock = FakeClock()
    deadline = Deadline(1.0, clock)
    clock.now += 1.0
    attempt = Failing([], clock)
    with pytest.raises(GaveUp) as caught:
        call_with_retries(attempt, deadline, sleep=clock.sleep)
    assert caught.value.tries == 0 and attempt.given == []
    assert caught.value.summary() == "0 tries in 0.0 s, not tried: the deadline passed before its turn"


def test_the_default_deadline_is_read_when_a_deadline_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Deadline().seconds == store_retry.DEADLINE_S == 60.0
    monkeypatch.setattr(store_retry, "DEADLINE_S", 1.5)
    assert Deadline().seconds == 1.5
    assert deadline_inside(30.0) == 1.5  # never longer than the default


def test_a_deadline_under_a_hard_limit_ends_a_margin_before_it() -> None:
    assert deadline_inside(30.0) == 30.0 - store_retry.LIMIT_MARGIN_S
    assert deadline_inside(600.0) == store_retry.DEADLINE_S
    assert deadline_inside(1.0) == 0.0


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (wrapped(BotoLike("SlowDown", 503)), True),
        (wrapped(BotoLike("InternalError", 500)), True),
        (wrapped(BotoLike("RequestTimeout", 400), TimeoutError), True),
        (wrapped(BotoLike(None, 502)), True),  # a gateway's answer, no S3 code
        (wrapped(BotoLike("ConditionalRequestConflict", 409)), True),
        (wrapped(BotoLike(None, 409)), True),
        (wrapped(BotoLike("AccessDenied", 403), PermissionError), False),
        (wrapped(BotoLike("NoSuchBucket", 404), FileNotFoundError), False),
        (wrapped(BotoLike("PreconditionFailed", 412), FileExistsError), False),
        (HttpErrorLike(503), True),
        (HttpErrorLike(429), True),
        (HttpErrorLike(401), False),
        (ConnectionResetError(104, "reset by peer"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (TimeoutError(), True),
        (FileExistsError("gs://b/error.pb"), False),
        (PermissionError("denied"), False),
        (NotADirectoryError(20, "not a directory"), False),
        (OSError("Forbidden: gs://b/x"), False),  # gcsfs's 403
        (OSError(28, "No space left on device"), False),
        (Exception("Server returned non-2xx status code: 503 Service Unavailable: slow down"), True),
        (Exception("Server returned non-2xx status code: 403 Forbidden"), False),
        (ValueError("bad request"), False),
    ],
)
def test_what_is_worth_another_try(error: BaseException, transient: bool) -> None:
    assert is_transient_store_error(error) is transient


def test_a_cause_chain_that_loops_ends() -> None:
    first, second = OSError("a"), OSError("b")
    first.__cause__, second.__cause__ = second, first
    assert is_transient_store_error(first) is False


def test_only_s3_write_conflicts_are_write_conflicts() -> None:
    assert is_write_conflict(wrapped(BotoLike("ConditionalRequestConflict", 409)))
    assert is_write_conflict(wrapped(BotoLike(None, 409)))
    assert not is_write_conflict(wrapped(BotoLike("SlowDown", 503)))
    assert not is_write_conflict(FileExistsError("x"))
