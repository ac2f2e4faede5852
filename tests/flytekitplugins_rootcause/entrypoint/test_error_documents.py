"""Which error files, and the stamps flytekit cannot give: pure decisions, no processes."""

from __future__ import annotations

import dataclasses

import pytest
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.entrypoint.error_documents import (
    ErrorDocumentPlanner,
    ErrorFilePolicy,
    carried_root_cause,
    decide_policy,
)
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from rootcause_core.ordering import Role
from rootcause_core.roles import role_from_marker
from rootcause_core.safe_text import MAX_REPORT_BYTES
from rootcause_core.testimony import VICTIM_STAMP_DELAY_NS, PodTestimony, read_testimony
from rootcause_core.timestamps import to_protobuf
from tests.entrypoint_tasks.raising import DEFAULT_TIMESTAMP_NS, failures

#: What flytekit's own hooks answer in these tests (its float time would be now, and its text a traceback).
FLYTEKIT_STAMP = Timestamp(seconds=1_700_000_000, nanos=5)


def planner() -> ErrorDocumentPlanner:
    return ErrorDocumentPlanner(
        "pod-1", flytekit_message=lambda e: "Trace:\n...", flytekit_timestamp=lambda e: FLYTEKIT_STAMP
    )


def error_message(error: Exception | None) -> str:
    """The message hook as flytekit calls it (``get_traceback_str``), on a fresh run's planner."""
    return planner().error_message(error)  # type: ignore[arg-type]


def error_timestamp(error: Exception | None) -> Timestamp:
    """The time hook as flytekit calls it (``get_container_error_timestamp``), on a fresh run's planner."""
    return planner().error_timestamp(error)


@pytest.mark.parametrize(
    ("strategy", "config", "expected"),
    [
        ("", None, ErrorFilePolicy(per_worker_files=False, error_pb_if_absent=False)),
        ("earliest", None, ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=False)),
        ("", ElasticRootCause(), ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=True)),
        ("earliest", ElasticRootCause(), ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=True)),
        (
            "",
            ElasticRootCause(per_worker_error_files=False),
            ErrorFilePolicy(per_worker_files=False, error_pb_if_absent=True),
        ),
        (
            "earliest",
            ElasticRootCause(per_worker_error_files=False, error_pb_if_absent=False),
            ErrorFilePolicy(per_worker_files=True, error_pb_if_absent=False),
        ),
        (
            "",
            ElasticRootCause(per_worker_error_files=False, error_pb_if_absent=False),
            ErrorFilePolicy(per_worker_files=False, error_pb_if_absent=False),
        ),
    ],
)
def test_policy_follows_the_backend_and_the_task_config(
    strategy: str, config: ElasticRootCause | None, expected: ErrorFilePolicy
) -> None:
    assert decide_policy(strategy, config) == expected


def test_only_no_strategy_and_no_config_is_flytekits_own_behaviour() -> None:
    assert decide_policy("", None).is_flytekit_default
    assert not decide_policy("earliest", None).is_flytekit_default
    assert not decide_policy("", ElasticRootCause()).is_flytekit_default


@given(st.integers(min_value=0, max_value=2**62))
def test_timestamps_keep_every_nanosecond(timestamp_ns: int) -> None:
    stamp = to_protobuf(timestamp_ns)
    assert stamp.seconds * 1_000_000_000 + stamp.nanos == timestamp_ns
    assert 0 <= stamp.nanos < 1_000_000_000


def test_root_cause_time_is_exact_where_flytekits_float_is_not() -> None:
    error = ElasticRootCauseError("[root cause] boom", failures(recoverable=False))
    stamp = error_timestamp(error)
    assert (stamp.seconds, stamp.nanos) == divmod(DEFAULT_TIMESTAMP_NS, 1_000_000_000)
    # the float flytekit carries has lost the last digits: that is why the exact time is needed
    assert round((error.timestamp % 1) * 1e9) != DEFAULT_TIMESTAMP_NS % 1_000_000_000


def test_root_cause_is_found_directly_or_inside_flytekits_user_error() -> None:
    error = ElasticRootCauseRecoverableError("[root cause] again", failures(recoverable=True))
    assert carried_root_cause(error) is error
    assert carried_root_cause(FlyteUserRuntimeException(error)) is error
    assert error_timestamp(FlyteUserRuntimeException(error)) == to_protobuf(DEFAULT_TIMESTAMP_NS)


@pytest.mark.parametrize(
    "error",
    [ValueError("x"), FlyteRecoverableException("x"), FlyteUserRuntimeException(ValueError("x")), None],
)
def test_other_errors_have_no_exact_time_and_keep_their_message(error: Exception | None) -> None:
    assert carried_root_cause(error) is None
    assert error_timestamp(error) is FLYTEKIT_STAMP
    assert error_message(error) == "Trace:\n..."


def test_a_root_cause_without_a_time_gets_flytekits() -> None:
    timeless = [dataclasses.replace(failure, timestamp_ns=None) for failure in failures(recoverable=False)]
    assert error_timestamp(ElasticRootCauseError("[root cause] boom", timeless)) == FLYTEKIT_STAMP


def test_root_cause_errors_carry_their_report_marker_first() -> None:
    error = ElasticRootCauseError("[root cause] rank 1 failed\n\nTraceback ...", failures(recoverable=False))
    message = error_message(error)
    testimony = PodTestimony(failed_at_ns=DEFAULT_TIMESTAMP_NS, stamp_delay_ns=0)
    assert message == f"{error.report}\n{testimony.line()}"
    assert role_from_marker(message.splitlines()[0]) == Role.CANDIDATE
    assert read_testimony(message) == testimony
    wrapped = FlyteUserRuntimeException(error)
    assert error_message(wrapped) == message


def test_marker_is_added_only_when_the_report_has_none() -> None:
    unmarked = ElasticRootCauseError("worker 3 ran out of memory", failures(recoverable=False))
    marked = error_message(unmarked)
    assert marked.splitlines()[0] == "[root cause] worker 3 ran out of memory"
    assert role_from_marker(marked) == Role.CANDIDATE


def test_only_victims_seen_gives_the_victim_marker() -> None:
    victims_only = [failure.with_role(Role.VICTIM) for failure in failures(recoverable=True)]
    error = ElasticRootCauseRecoverableError("all workers were torn down", victims_only)
    marked = error_message(error)
    assert marked.startswith("[victim] ")
    assert role_from_marker(marked) == Role.VICTIM


def test_a_victim_pod_stamps_its_document_later_and_testifies_the_true_time() -> None:
    """Upstream Flyte's console picks the strictly earliest stamp: a victim's must lose to every root
    cause within the clock skew between nodes; the true time is in the testimony line."""
    victims_only = [failure.with_role(Role.VICTIM) for failure in failures(recoverable=True)]
    error = ElasticRootCauseRecoverableError("[victim] rank 0 was torn down", victims_only)
    assert error_timestamp(error) == to_protobuf(DEFAULT_TIMESTAMP_NS + VICTIM_STAMP_DELAY_NS)
    said = read_testimony(error_message(error))
    assert said == PodTestimony(failed_at_ns=DEFAULT_TIMESTAMP_NS, stamp_delay_ns=VICTIM_STAMP_DELAY_NS)


def test_the_testimony_survives_a_report_cut_to_the_message_limit() -> None:
    error = ElasticRootCauseError("[root cause] " + "x" * (2 * MAX_REPORT_BYTES), failures(recoverable=False))
    message = error_message(error)
    assert len(message.encode()) <= MAX_REPORT_BYTES
    assert read_testimony(message) == PodTestimony(failed_at_ns=DEFAULT_TIMESTAMP_NS, stamp_delay_ns=0)
