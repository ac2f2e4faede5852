"""``flytekitplugins_rootcause.exceptions``: the flytekit exception each diagnosis becomes, its Flyte kind and
its exact time (no processes)."""

from __future__ import annotations

import dataclasses

import pytest
from flytekit.exceptions.system import FlyteSystemException
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException

from flytekitplugins_rootcause.exceptions import (
    AgentHungError,
    ElasticRootCauseError,
    ElasticRootCauseRecoverableError,
    Rank0OutputsMissingError,
    root_cause_error,
)
from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, Trigger, report_for
from rootcause_engine.agent.rank_0_outputs import MissingRank0Outputs, Rank0Outcome, Rank0Wait
from tests.entrypoint_tasks.raising import DEFAULT_TIMESTAMP_NS, failures

MEMBERS = (Member(0, "pod-0", 0, 1), Member(1, "pod-1", 1, 1))
LOST = (LostPod(1, "pod-1", DEFAULT_TIMESTAMP_NS - 5),)


@pytest.mark.parametrize("kind", [ElasticRootCauseError, ElasticRootCauseRecoverableError])
def test_an_error_without_a_failure_is_refused(kind: type[Exception]) -> None:
    with pytest.raises(ValueError, match="needs at least one failure"):
        kind("[root cause] nothing", [])


def test_a_root_cause_that_is_not_recoverable_is_flytekit_s_user_error_wrapping_a_runtime_error() -> None:
    ranked = failures(recoverable=False)
    error = ElasticRootCauseError("[root cause] rank 1 failed", ranked, members=list(MEMBERS), lost_pods=list(LOST))
    assert isinstance(error, FlyteUserRuntimeException) and not isinstance(error, FlyteRecoverableException)
    assert error.error_code == "USER:RuntimeError"
    assert isinstance(error.value, RuntimeError) and str(error.value) == "[root cause] rank 1 failed"
    assert error.root_cause is ranked[0] and error.failures == tuple(ranked)
    assert (error.members, error.lost_pods) == (MEMBERS, LOST)  # tuples, whatever sequence came in
    assert error.report == "[root cause] rank 1 failed" and error.diagnosis is None


def test_a_recoverable_root_cause_is_flytekit_s_recoverable_error_with_the_report_as_its_message() -> None:
    error = ElasticRootCauseRecoverableError("[root cause] rank 1 raised", failures(recoverable=True))
    assert isinstance(error, FlyteRecoverableException)
    assert str(error) == "USER:Recoverable: error=[root cause] rank 1 raised"
    assert (error.members, error.lost_pods, error.agreed_worker) == ((), (), None)


def test_the_flyte_timestamp_is_the_root_cause_s_and_the_nanoseconds_stay_exact() -> None:
    error = ElasticRootCauseError("[root cause] boom", failures(recoverable=False))
    assert error.timestamp_ns == DEFAULT_TIMESTAMP_NS
    assert error.timestamp == pytest.approx(DEFAULT_TIMESTAMP_NS / 1e9, abs=1e-6)
    timeless = [dataclasses.replace(failure, timestamp_ns=None) for failure in failures(recoverable=False)]
    assert ElasticRootCauseError("[root cause] boom", timeless).timestamp_ns is None


@pytest.mark.parametrize(
    ("recoverable", "kind"), [(False, ElasticRootCauseError), (True, ElasticRootCauseRecoverableError)]
)
def test_a_diagnosis_becomes_the_error_of_its_recoverability_and_keeps_what_the_pod_knows(
    recoverable: bool, kind: type[Exception]
) -> None:
    diagnosis = report_for(failures(recoverable), members=MEMBERS, lost_pods=LOST)
    assert diagnosis.recoverable is recoverable
    error = root_cause_error(diagnosis)
    assert type(error) is kind
    assert isinstance(error, ElasticRootCauseError | ElasticRootCauseRecoverableError)
    assert error.diagnosis is diagnosis and error.report == diagnosis.report
    assert error.failures == diagnosis.failures and (error.members, error.lost_pods) == (MEMBERS, LOST)


def test_a_hung_agent_without_a_failed_worker_is_a_system_error_with_the_report() -> None:
    diagnosis = Diagnosis(Trigger.AGENT_HUNG, (), "[victim] the agent hung after every worker exited 0", True)
    error = root_cause_error(diagnosis)
    assert isinstance(error, AgentHungError) and isinstance(error, FlyteSystemException)
    assert error.diagnosis is diagnosis and error.report == diagnosis.report
    assert str(error) == f"SYSTEM:Unknown: error={diagnosis.report}"


def test_missing_rank_0_outputs_is_a_recoverable_error_saying_what_the_wait_found() -> None:
    missing = MissingRank0Outputs(Rank0Wait(Rank0Outcome.NEITHER, 120.0, 40), "s3://bucket/run/0", "pod-1",
                                  range(1, 2), "pod-0")
    error = Rank0OutputsMissingError(missing)
    assert isinstance(error, FlyteRecoverableException) and error.missing is missing
    assert str(error) == f"USER:Recoverable: error={missing.message}"
    assert "the pod holding global rank 0 (pod-0) wrote neither outputs.pb" in missing.message
