"""The training operator's rule as the harness applies it: the first reported pod exit decides."""

from __future__ import annotations

from pathlib import Path

from rootcause_harness.operator import JobPhase, Operator, copy_local_prefix, kubernetes_exit_code


def _operator(tmp_path: Path) -> tuple[Operator, Path]:
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    return Operator(copy_local_prefix(prefix), tmp_path / "snapshot"), prefix


def test_the_first_pod_exiting_0_makes_the_job_succeeded_and_the_prefix_is_read_then(tmp_path: Path) -> None:
    operator, prefix = _operator(tmp_path)
    (prefix / "error-a.pb").write_bytes(b"first")
    operator.pod_exited("pod-0", 0, reported=True)
    (prefix / "error-b.pb").write_bytes(b"later")  # written after the decision: Flyte never reads it
    operator.pod_exited("pod-1", 1, reported=True)
    decision = operator.decision
    assert (decision.phase, decision.pod, decision.code) == (JobPhase.SUCCEEDED, "pod-0", 0)
    assert decision.snapshot is not None
    assert sorted(p.name for p in decision.snapshot.iterdir()) == ["error-a.pb"]


def test_a_non_zero_first_exit_fails_the_job_and_nothing_is_read(tmp_path: Path) -> None:
    operator, prefix = _operator(tmp_path)
    (prefix / "error-a.pb").write_bytes(b"doc")
    operator.pod_exited("pod-1", -9, reported=True)  # killed after the grace period
    operator.pod_exited("pod-0", 0, reported=True)
    decision = operator.decision
    assert (decision.phase, decision.pod, decision.code, decision.snapshot) == (JobPhase.FAILED, "pod-1", 137, None)


def test_a_silent_node_s_pod_never_decides(tmp_path: Path) -> None:
    """A lost or frozen node's kubelet reports nothing: the next pod's exit decides."""
    operator, _ = _operator(tmp_path)
    operator.pod_exited("pod-lost", -9, reported=False)
    assert operator.decision.phase == JobPhase.UNDECIDED
    operator.pod_exited("pod-0", 0, reported=True)
    assert (operator.decision.phase, operator.decision.pod) == (JobPhase.SUCCEEDED, "pod-0")


def test_exit_codes_read_as_kubernetes_reports_them() -> None:
    assert [kubernetes_exit_code(code) for code in (0, 3, -9, -15)] == [0, 3, 137, 143]
