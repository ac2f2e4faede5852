"""``flytekitplugins_rootcause.straggler.exceptions``: the error ``action='fail'`` raises, as flytekit shows it."""

from __future__ import annotations

from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException

from flytekitplugins_rootcause.straggler import exceptions
from rootcause_engine.straggler.decision import OK, SLOW_COMPUTE, SLOW_NETWORK
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from rootcause_engine.straggler.settings import StragglerCheckError, StragglerConfigError


def _report() -> StragglerReport:
    nodes = [
        NodeResult(0, "train-worker-0", "host-a", 1, compute_s=[0.01], comm_s=[0.02], verdict=OK),
        NodeResult(1, "train-worker-1", "host-b", 1, compute_s=[0.05], comm_s=[0.02], verdict=SLOW_COMPUTE),
        NodeResult(2, "train-worker-2", "host-c", 1, compute_s=[0.01], comm_s=[0.09], verdict=SLOW_NETWORK),
    ]
    return StragglerReport(nodes=nodes, threshold=1.3, network_threshold=2.0, action="fail")


def test_the_detected_error_is_a_user_error_flyte_does_not_retry() -> None:
    error = exceptions.StragglerDetectedError(_report())
    assert isinstance(error, FlyteUserRuntimeException) and not isinstance(error, FlyteRecoverableException)
    assert error.error_code == "USER:RuntimeError" and isinstance(error.value, RuntimeError)


def test_the_message_names_every_flagged_node_and_says_what_to_do() -> None:
    report = _report()
    error = exceptions.StragglerDetectedError(report)
    assert error.report is report
    message = str(error.value)
    assert message == report.failure_message()
    assert message.splitlines()[0] == (
        "Straggler check failed before training started: pod 'train-worker-1' (node rank 1) is slow-compute, "
        "pod 'train-worker-2' (node rank 2) is slow-network."
    )
    assert "train-worker-0" in message  # the table shows the healthy node too
    assert message.endswith("set StragglerCheck(action='warn') to train anyway.")


def test_a_reason_ends_the_first_line() -> None:
    error = exceptions.StragglerDetectedError(_report(), "the slow pod hosts the rendezvous store")
    assert str(error.value).splitlines()[0].endswith("is slow-network (the slow pod hosts the rendezvous store).")


def test_the_engine_s_errors_are_importable_from_here_as_the_same_classes() -> None:
    assert exceptions.__all__ == ["StragglerCheckError", "StragglerConfigError", "StragglerDetectedError"]
    assert exceptions.StragglerCheckError is StragglerCheckError
    assert exceptions.StragglerConfigError is StragglerConfigError
