"""Victims versus root-cause candidates (rootcause_core.roles)."""

from __future__ import annotations

import signal

import pytest

from rootcause_core.ordering import Role
from rootcause_core.roles import classify_role, rank_from_report, role_from_marker, role_marker


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234",
        "RuntimeError: Connection reset by peer",
        "DistBackendError: NCCL error: remote process exited or there was a network error",
        "RuntimeError: NCCL communicator was aborted on rank 3",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)",
        "RendezvousClosedError: rendezvous is closed",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Write error [127.0.0.1]:1: Broken pipe",
        "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation",
        "torch.distributed.DistStoreError: wait timeout after 20000ms, keys: /worker/attempt_0/default_pg/0//cpu//0/3",
    ],
)
def test_peer_loss_messages_are_victims(message: str) -> None:
    assert classify_role(message=message) == Role.VICTIM


@pytest.mark.parametrize(
    "message",
    [
        "ValueError: bad batch",
        "torch.OutOfMemoryError: CUDA out of memory",
        "KeyError: 'label'",
        "",
        "BrokenPipeError: [Errno 32] Broken pipe",
        "TimeoutError: timed out waiting for the dataset server",
        # a store wait for the user's own keys names no peer of the process group
        "torch.distributed.DistStoreError: wait timeout after 5000ms, keys: /dataset/ready",
    ],
)
def test_own_errors_are_candidates(message: str) -> None:
    assert classify_role(message=message) == Role.CANDIDATE


def test_teardown_signals_and_agent_termination_make_victims() -> None:
    assert classify_role(signal_number=int(signal.SIGTERM)) == Role.VICTIM
    assert classify_role(signal_number=int(signal.SIGINT)) == Role.VICTIM
    assert classify_role(signal_number=int(signal.SIGKILL)) == Role.CANDIDATE
    assert classify_role(signal_number=int(signal.SIGKILL), terminated_by_agent=True) == Role.VICTIM
    assert classify_role(signal_number=int(signal.SIGABRT)) == Role.CANDIDATE


def test_exception_types_anywhere_in_the_mro() -> None:
    assert classify_role(exception_types=("MyNetError", "DistNetworkError", "DistError")) == Role.VICTIM
    assert classify_role(exception_types=("ValueError", "Exception")) == Role.CANDIDATE


def test_marker_written_by_the_plugin_wins_over_text_patterns() -> None:
    victim_report = f"{role_marker(Role.VICTIM)} rank 1 ...: ValueError: x"
    cause_report = f"{role_marker(Role.CANDIDATE)} rank 0 ...: RuntimeError: Connection reset by peer"
    assert classify_role(message=victim_report) == Role.VICTIM
    assert classify_role(message=cause_report) == Role.CANDIDATE


def test_marker_found_inside_flytekit_formatting() -> None:
    wrapped = "Trace:\n\n  ...\nMessage:\n\n    ElasticRootCauseError: USER:RuntimeError: error=[victim] rank 2 ..."
    assert role_from_marker(wrapped) == Role.VICTIM
    assert role_from_marker("a [victim]without space") is None
    assert role_from_marker("no marker") is None


def test_rank_is_read_from_the_marked_summary_line() -> None:
    report = "[root cause] rank 12 (local rank 0, group rank 3) on worker pod-3 (pid 7, SIGKILL) failed at ..."
    assert rank_from_report(report) == 12
    assert rank_from_report("Message: ... error=[victim] rank 3 (local rank 1, ...") == 3
    assert rank_from_report("ValueError: rank 3 failed") is None
    assert rank_from_report("[root cause] rank ? (local rank ?, ...") is None
