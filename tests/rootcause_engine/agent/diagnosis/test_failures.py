"""The agent's record of one failed worker (``rootcause_engine/agent/diagnosis/failures.py``): signal names,
its time in seconds, and a role changed without touching the rest."""

from __future__ import annotations

import dataclasses
import signal

import pytest

from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.diagnosis.failures import WorkerFailure, signal_name
from tests.worker_failures import worker_failure


@pytest.mark.parametrize(
    ("number", "name"),
    [(int(signal.SIGKILL), "SIGKILL"), (int(signal.SIGTERM), "SIGTERM"), (34, "SIGRTMIN"), (42, "SIG42"),
     (0, "SIG0"), (200, "SIG200"), (None, None)],
)
def test_signal_numbers_get_python_s_name_or_a_made_up_one(number: int | None, name: str | None) -> None:
    assert signal_name(number) == name


def test_a_failure_names_its_signal_and_none_without_one() -> None:
    assert worker_failure(signal_number=int(signal.SIGSEGV)).signal_name == "SIGSEGV"
    assert worker_failure(signal_number=99).signal_name == "SIG99"
    assert worker_failure(exitcode=1).signal_name is None


def test_the_failure_time_in_seconds_is_what_flyte_exceptions_carry() -> None:
    assert worker_failure(timestamp_ns=1_500_000_000).timestamp_s == 1.5
    assert worker_failure(timestamp_ns=1_700_000_000_250_000_000).timestamp_s == pytest.approx(1_700_000_000.25)
    assert worker_failure(timestamp_ns=None).timestamp_s is None


def test_with_role_gives_a_new_record_and_leaves_the_original_as_it_was() -> None:
    original = worker_failure(3, message="RuntimeError: Connection closed by peer", attempt=2, source="error file")
    victim = original.with_role(Role.VICTIM)
    assert (original.role, victim.role) == (Role.CANDIDATE, Role.VICTIM)
    assert dataclasses.replace(victim, role=Role.CANDIDATE) == original


def test_a_record_cannot_be_changed_in_place() -> None:
    failure = worker_failure()
    with pytest.raises(dataclasses.FrozenInstanceError):
        failure.role = Role.VICTIM  # type: ignore[misc]


def test_optional_fields_default_to_no_source_the_first_attempt_and_no_refused_retry() -> None:
    failure = WorkerFailure(
        global_rank=None, local_rank=None, group_rank=None, worker="pod-0", host="h", pid=None, exitcode=None,
        signal_number=None, exception_type=None, message="", traceback="", timestamp_ns=None,
        time_source=TimeSource.UNKNOWN, role=Role.CANDIDATE, recoverable=False,
    )  # fmt: skip
    assert (failure.source, failure.attempt, failure.retry_refused) == ("", 0, False)
    assert (failure.signal_name, failure.timestamp_s) == (None, None)
