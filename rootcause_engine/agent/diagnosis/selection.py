"""Build one ``WorkerFailure`` per failed worker of a pod and order them, root cause first.

Pure: every input is a :class:`~rootcause_engine.agent.launch_record.WorkerRecord` (what the
watcher saw, what the worker recorded, what torch detected), so the decision is tested without
processes; whether a worker failed and when is the record's answer. A worker still alive when
the agent's first termination signal went out (``signals_ns``), and whose own failure (if any)
came after it, was terminated by the agent: a victim, whatever signal finally ended it. The
moment is the signal's, not the teardown's start: a worker that records a failure of its own
while the agent probes its peers failed before anything reached it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, TimeSource, order_failures
from rootcause_core.roles import classify_role
from rootcause_engine.agent.diagnosis.failures import WorkerFailure
from rootcause_engine.agent.diagnosis.hang import HangVerdict, hang_verdict, stalled_collective
from rootcause_engine.agent.launch_record import WorkerRecord

#: Why a function worker that exited with code 0 before returning its result failed.
EXITED_WITHOUT_RESULT = (
    "exited with code 0 before returning its result (os._exit(0), or an interrupt that torch's worker "
    "wrapper turns into exit code 0, ended it early)"
)


def _terminated_by_agent(evidence: WorkerRecord, failure_ns: int | None, signals_ns: int | None) -> bool:
    """Alive when the termination signals went out and no failure of its own before that."""
    if signals_ns is None:
        return False
    if evidence.recorded is not None and evidence.recorded.timestamp_ns is not None:
        return evidence.recorded.timestamp_ns >= signals_ns
    if evidence.exit is not None:
        return evidence.exit.exit_ns >= signals_ns
    return failure_ns is not None and failure_ns >= signals_ns


def build_failure(
    evidence: WorkerRecord,
    *,
    signals_ns: int | None,
    worker: str,
    host: str,
    stalled: CollectivePosition | None = None,
) -> WorkerFailure | None:
    """The failure record of one worker, or ``None`` when it did not fail.

    ``stalled``: the collective peers timed out in (``hang.stalled_collective``); a worker alive at
    teardown that never entered it is the hung root cause (``hang.hang_verdict``).
    """
    if not evidence.failed:
        return None
    exitcode, signal_number = evidence.exit_status()
    timestamp_ns, source = evidence.failure_time()
    recorded = evidence.recorded
    # torch's own text for a worker without an error file ("Signal 9 (SIGKILL) received by PID ...")
    # says less than the signal and exit code the report shows, so only a recorded message is kept.
    message = recorded.message if recorded else (EXITED_WITHOUT_RESULT if evidence.exited_without_result else "")
    # A worker that recorded its own failure before the signals went out may still be SIGTERMed while
    # it exits: that signal ends a failure already recorded, so it must not make the worker a victim.
    failed_before_signals = (
        recorded is not None
        and recorded.timestamp_ns is not None
        and signals_ns is not None
        and recorded.timestamp_ns < signals_ns
    )
    role = classify_role(
        exception_types=recorded.exception_mro if recorded else (),
        message=message,
        signal_number=None if failed_before_signals else signal_number,
        terminated_by_agent=_terminated_by_agent(evidence, timestamp_ns, signals_ns),
    )
    launched = evidence.launched
    failure = WorkerFailure(
        global_rank=launched.global_rank,
        local_rank=launched.local_rank,
        group_rank=launched.group_rank,
        worker=(recorded.worker if recorded and recorded.worker else worker),
        host=(recorded.host if recorded and recorded.host else host),
        pid=launched.pid,
        exitcode=exitcode,
        signal_number=signal_number,
        exception_type=recorded.exception_type if recorded else None,
        message=message,
        traceback=recorded.traceback if recorded else "",
        timestamp_ns=timestamp_ns,
        time_source=source,
        role=role,
        recoverable=bool((recorded and recorded.recoverable) or evidence.recoverable_marker),
        source=launched.error_file,
        attempt=launched.attempt,
        retry_refused=bool(recorded and recorded.retry_refused),
    )
    # a worker that failed on its own before the teardown is no hung one, whatever it answered
    hang = None if failed_before_signals else hang_verdict(evidence.probe, stalled, launched.global_rank)
    return failure if hang is None else as_hung(failure, hang)


def as_hung(failure: WorkerFailure, hang: HangVerdict) -> WorkerFailure:
    """The record of a worker the agent ended while it hung: a root cause, at its last progress."""
    return dataclasses.replace(
        failure,
        exception_type=None,
        message=hang.message(),
        traceback=hang.stacks_text(),
        timestamp_ns=hang.last_progress_ns,
        time_source=TimeSource.LAST_PROGRESS,
        role=Role.CANDIDATE,
    )


def rank_failures(
    evidence: list[WorkerRecord],
    *,
    signals_ns: int | None,
    worker: str,
    host: str,
    announced_stalls: tuple[CollectivePosition, ...] = (),
) -> list[WorkerFailure]:
    """All failures of the attempt, root cause first (the shared rule of ``backend_reader``).

    ``announced_stalls``: collectives that peer pods announced they timed out in.
    """
    stalled = stalled_collective((item.recorded for item in evidence), announced_stalls)
    failures = [
        failure
        for item in evidence
        if (
            failure := build_failure(item, signals_ns=signals_ns, worker=worker, host=host, stalled=stalled)
        ) is not None
    ]
    return order_failures(failures)


class RetryRule(enum.Enum):
    """Which failures a front-end's orchestrator retries: the job's root cause is judged by its rule."""

    #: flytekit: a user error is retried only when its exception asks for it
    #: (``FlyteRecoverableException``); a worker killed by a signal, or hung, is not.
    ON_REQUEST = "on-request"
    #: Flyte 2: every error is retried unless its exception forbids it
    #: (``flyte.errors.NonRecoverableError``), as Flyte 2's runtime decides for a task's own error.
    UNLESS_REFUSED = "unless-refused"


def is_recoverable(failures: Sequence[WorkerFailure], rule: RetryRule = RetryRule.ON_REQUEST) -> bool:
    """Retry when the root cause allows it by ``rule``, or when only victims were seen in this pod.

    A pod that saw only victims lost a peer elsewhere (another pod's failure, a preempted node):
    retrying is what torch elastic itself would do, and the true cause is reported by that pod.
    """
    if not failures:
        return False
    root = failures[0]
    if root.role == Role.VICTIM:
        return True
    return root.recoverable if rule == RetryRule.ON_REQUEST else not root.retry_refused
