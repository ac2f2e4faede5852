"""Failure records from the agent's evidence, and the raised error (pure, no processes)."""

from __future__ import annotations

import dataclasses
import signal

from flytekitplugins_rootcause.exceptions import (
    ElasticRootCauseError,
    ElasticRootCauseRecoverableError,
    root_cause_error,
)
from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.diagnosis.pipeline import report_for
from rootcause_engine.agent.diagnosis.report import format_root_cause_message
from rootcause_engine.agent.diagnosis.selection import RetryRule, is_recoverable, rank_failures
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_record import Detection, WorkerRecord
from rootcause_engine.worker.recorder import RecordedError

S = 1_000_000_000
T0 = 1_795_000_000 * S


def launched(rank: int) -> LaunchedWorker:
    return LaunchedWorker(attempt=0, local_rank=rank, global_rank=rank, group_rank=0, pid=100 + rank,
                          error_file=f"/tmp/attempt_0/{rank}/error.json")


def recorded(message: str, ns: int | None, *, mro: tuple[str, ...] = ("ValueError",), recoverable: bool = False,
             ) -> RecordedError:
    return RecordedError(message, "Traceback (most recent call last):\n  boom\n", ns, f"builtins.{mro[0]}", mro,
                         recoverable, None, None, None, "host-a", "pod-0", None)


def rank(evidence: list[WorkerRecord], teardown_ns: int | None = None):
    return rank_failures(evidence, signals_ns=teardown_ns, worker="pod-0", host="host-a")


def test_recorded_time_beats_observed_and_detected() -> None:
    worker = WorkerRecord(launched(0), ProcessExit(100, T0 + 3 * S, 1, None), recorded("ValueError: x", T0),
                            Detection(timestamp_s=T0 // S + 9, exitcode=1))
    [failure] = rank([worker])
    assert (failure.timestamp_ns, failure.time_source) == (T0, TimeSource.RECORDED)


def test_signal_death_uses_the_observed_exit_not_the_detection_time() -> None:
    killed = WorkerRecord(launched(1), ProcessExit(101, T0 + 100, None, int(signal.SIGKILL)), None,
                            Detection(timestamp_s=T0 // S + 5, exitcode=-9))
    raised_later = WorkerRecord(launched(0), ProcessExit(100, T0 + 2 * S, 1, None),
                                  recorded("ValueError: late", T0 + S))
    failures = rank([raised_later, killed])
    assert [f.global_rank for f in failures] == [1, 0]
    assert failures[0].time_source == TimeSource.OBSERVED and failures[0].signal_name == "SIGKILL"


def test_detection_time_is_the_last_resort() -> None:
    [failure] = rank([WorkerRecord(launched(0), None, None, Detection(timestamp_s=T0 // S, exitcode=3))])
    assert (failure.timestamp_ns, failure.time_source, failure.exitcode) == (T0, TimeSource.DETECTED, 3)


def test_workers_alive_at_teardown_are_victims_even_when_sigkilled() -> None:
    teardown = T0 + S
    cause = WorkerRecord(launched(2), ProcessExit(102, T0 + 10, 1, None), recorded("ValueError: x", T0))
    termed = WorkerRecord(launched(0), ProcessExit(100, teardown + 5, None, int(signal.SIGTERM)), None)
    killed = WorkerRecord(launched(1), ProcessExit(101, teardown + 5 * S, None, int(signal.SIGKILL)), None)
    failures = rank([killed, termed, cause], teardown)
    assert [(f.global_rank, f.role) for f in failures] == [(2, Role.CANDIDATE), (0, Role.VICTIM), (1, Role.VICTIM)]


def test_victim_that_failed_first_still_loses_to_the_cause() -> None:
    peer_error = WorkerRecord(launched(0), None, recorded("RuntimeError: Connection closed by peer", T0,
                                                            mro=("RuntimeError",)))
    oom = WorkerRecord(launched(1), None, recorded("OutOfMemoryError: CUDA out of memory", T0 + S,
                                                     mro=("OutOfMemoryError",)))
    failures = rank([peer_error, oom])
    assert [f.global_rank for f in failures] == [1, 0]
    assert failures[1].role == Role.VICTIM


def test_exit_status_from_torch_handle_when_the_watcher_lost_the_race() -> None:
    lost = WorkerRecord(launched(0), ProcessExit(100, T0, None, None), None, torch_exitcode=-int(signal.SIGABRT))
    [failure] = rank([lost])
    assert failure.signal_name == "SIGABRT"


def test_a_worker_that_raised_then_aborted_while_exiting_keeps_its_exception_as_the_root_cause() -> None:
    """gloo can abort a process at interpreter exit (docs/upstream.md): SIGABRT after the recorded error."""
    teardown = T0 + S
    aborted = WorkerRecord(launched(1), ProcessExit(101, T0 + 40_000_000, None, int(signal.SIGABRT)),
                             recorded("ValueError: bad batch", T0))
    peer = WorkerRecord(launched(0), ProcessExit(100, T0 + S // 2, 1, None),
                          recorded("RuntimeError: Connection closed by peer", T0 + S // 2, mro=("RuntimeError",)))
    failures = rank([peer, aborted], teardown)
    assert [(f.global_rank, f.role) for f in failures] == [(1, Role.CANDIDATE), (0, Role.VICTIM)]
    cause = failures[0]
    assert (cause.timestamp_ns, cause.time_source, cause.exception_type) == (T0, TimeSource.RECORDED,
                                                                             "builtins.ValueError")
    assert "ValueError: bad batch" in format_root_cause_message(failures)


def test_workers_that_exited_cleanly_are_not_failures() -> None:
    ok = WorkerRecord(launched(0), ProcessExit(100, T0, 0, None), None)
    assert rank([ok]) == []


def test_recoverable_root_cause_and_victim_only_pods_are_recoverable() -> None:
    recoverable = rank([WorkerRecord(launched(0), None, recorded("FlyteRecoverableException: spot", T0,
                                                                 recoverable=True))])
    assert is_recoverable(recoverable)
    assert isinstance(root_cause_error(report_for(recoverable)), ElasticRootCauseRecoverableError)
    only_victims = rank([WorkerRecord(launched(0), None, recorded("RuntimeError: Connection reset by peer", T0,
                                                                  mro=("RuntimeError",)))])
    assert only_victims[0].role == Role.VICTIM and is_recoverable(only_victims)
    fatal = rank([WorkerRecord(launched(0), None, recorded("ValueError: x", T0))])
    error = root_cause_error(report_for(fatal))
    assert isinstance(error, ElasticRootCauseError) and not is_recoverable(fatal)
    assert error.timestamp == T0 / S and error.timestamp_ns == T0


def test_flyte_2_s_rule_retries_every_root_cause_but_one_that_forbids_it() -> None:
    plain = rank([WorkerRecord(launched(0), None, recorded("ValueError: x", T0))])
    killed = rank([WorkerRecord(launched(0), ProcessExit(100, T0, None, 9), None)])
    assert is_recoverable(plain, RetryRule.UNLESS_REFUSED) and is_recoverable(killed, RetryRule.UNLESS_REFUSED)
    assert not is_recoverable(killed)  # flytekit's rule: only a requested retry
    refused = dataclasses.replace(recorded("NonRecoverableError: bad data", T0), retry_refused=True)
    forbidding = rank([WorkerRecord(launched(0), None, refused)])
    assert forbidding[0].retry_refused and not is_recoverable(forbidding, RetryRule.UNLESS_REFUSED)
    assert report_for(forbidding, retry_rule=RetryRule.UNLESS_REFUSED).recoverable is False


def test_own_failure_recorded_before_teardown_is_not_undone_by_a_later_sigterm() -> None:
    teardown = T0 + S
    slow_exit = WorkerRecord(launched(0), ProcessExit(100, teardown + 2 * S, None, int(signal.SIGTERM)),
                               recorded("ValueError: x", T0))
    [failure] = rank([slow_exit], teardown)
    assert failure.role == Role.CANDIDATE and failure.signal_name == "SIGTERM"
