"""Build one ``WorkerFailure`` per failed worker of a pod and order them, root cause first.

Pure: every input (what the watcher saw, what the worker recorded, what torch detected) is passed
in, so the decision is tested without processes; ``evidence.gather_evidence`` collects those inputs
from a finished launch.

Time of a failure, most precise first: recorded by the worker at the exception (ns) > exit observed
by the death watcher (ns) > torch's whole-second stamp / detection time. A worker still alive when
the agent began teardown, and whose own failure (if any) came after it, was terminated by the
agent: a victim, whatever signal finally ended it.
"""

from __future__ import annotations

import dataclasses

from flytekitplugins_rootcause.agent.death_watcher import ProcessExit
from flytekitplugins_rootcause.agent.diagnosis.failures import WorkerFailure
from flytekitplugins_rootcause.agent.diagnosis.hang import HangVerdict, hang_verdict, stalled_collective
from flytekitplugins_rootcause.agent.launch_observer import LaunchedWorker
from flytekitplugins_rootcause.agent.worker_probe import ProbeAnswer
from flytekitplugins_rootcause.worker.recorder import RecordedError
from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, TimeSource, order_failures
from rootcause_core.roles import classify_role
from rootcause_core.timestamps import from_seconds


@dataclasses.dataclass(frozen=True)
class Detection:
    """What torch's agent reported for a worker (``ProcessFailure``), the least precise source."""

    timestamp_s: int | None
    exitcode: int | None


@dataclasses.dataclass(frozen=True)
class WorkerEvidence:
    """Everything the agent knows about one worker of the failed attempt."""

    launched: LaunchedWorker
    exit: ProcessExit | None
    recorded: RecordedError | None
    detection: Detection | None = None
    recoverable_marker: bool = False
    torch_exitcode: int | None = None  # from torch's process handle; negative N: signal N
    exited_without_result: bool = False  # a function worker that exited 0 before returning
    probe: ProbeAnswer | None = None  # its answer when probed before the teardown (it was alive)


#: Why a function worker that exited with code 0 before returning its result failed.
EXITED_WITHOUT_RESULT = (
    "exited with code 0 before returning its result (os._exit(0), or an interrupt that torch's worker "
    "wrapper turns into exit code 0, ended it early)"
)


def _exit_status(evidence: WorkerEvidence) -> tuple[int | None, int | None]:
    """(exit code, signal number): the watcher's reading, else torch's process handle, else detection."""
    if evidence.exit is not None and (evidence.exit.exitcode is not None or evidence.exit.signal_number):
        return evidence.exit.exitcode, evidence.exit.signal_number
    code = evidence.torch_exitcode
    if code is None and evidence.detection is not None:
        code = evidence.detection.exitcode
    if code is not None and code < 0:  # torch's handles report death by signal N as -N
        return None, -code
    return code, None


def _failed(evidence: WorkerEvidence, exitcode: int | None, signal_number: int | None) -> bool:
    if evidence.recorded is not None or signal_number is not None or evidence.exited_without_result:
        return True
    if exitcode is not None:
        return exitcode != 0
    return evidence.detection is not None


def _failure_time(evidence: WorkerEvidence) -> tuple[int | None, TimeSource]:
    if evidence.recorded is not None and evidence.recorded.timestamp_ns is not None:
        return evidence.recorded.timestamp_ns, TimeSource.RECORDED
    if evidence.exit is not None:
        return evidence.exit.exit_ns, TimeSource.OBSERVED
    if evidence.detection is not None and evidence.detection.timestamp_s is not None:
        return from_seconds(evidence.detection.timestamp_s), TimeSource.DETECTED
    return None, TimeSource.UNKNOWN


def _terminated_by_agent(evidence: WorkerEvidence, failure_ns: int | None, teardown_ns: int | None) -> bool:
    """Alive when teardown began and no failure of its own before that."""
    if teardown_ns is None:
        return False
    if evidence.recorded is not None and evidence.recorded.timestamp_ns is not None:
        return evidence.recorded.timestamp_ns >= teardown_ns
    if evidence.exit is not None:
        return evidence.exit.exit_ns >= teardown_ns
    return failure_ns is not None and failure_ns >= teardown_ns


def build_failure(
    evidence: WorkerEvidence,
    *,
    teardown_ns: int | None,
    worker: str,
    host: str,
    stalled: CollectivePosition | None = None,
) -> WorkerFailure | None:
    """The failure record of one worker, or ``None`` when it did not fail.

    ``stalled``: the collective peers timed out in (``hang.stalled_collective``); a worker alive at
    teardown that never entered it is the hung root cause (``hang.hang_verdict``).
    """
    exitcode, signal_number = _exit_status(evidence)
    if not _failed(evidence, exitcode, signal_number):
        return None
    timestamp_ns, source = _failure_time(evidence)
    recorded = evidence.recorded
    # torch's own text for a worker without an error file ("Signal 9 (SIGKILL) received by PID ...")
    # says less than the signal and exit code the report shows, so only a recorded message is kept.
    message = recorded.message if recorded else (EXITED_WITHOUT_RESULT if evidence.exited_without_result else "")
    # A worker that recorded its own failure before teardown began may still be SIGTERMed while it
    # exits: that signal ends a failure already recorded, so it must not make the worker a victim.
    failed_before_teardown = (
        recorded is not None
        and recorded.timestamp_ns is not None
        and teardown_ns is not None
        and recorded.timestamp_ns < teardown_ns
    )
    role = classify_role(
        exception_types=recorded.exception_mro if recorded else (),
        message=message,
        signal_number=None if failed_before_teardown else signal_number,
        terminated_by_agent=_terminated_by_agent(evidence, timestamp_ns, teardown_ns),
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
    )
    # a worker that failed on its own before the teardown is no hung one, whatever it answered
    hang = None if failed_before_teardown else hang_verdict(evidence.probe, stalled, launched.global_rank)
    return failure if hang is None else _as_hung(failure, hang)


def _as_hung(failure: WorkerFailure, hang: HangVerdict) -> WorkerFailure:
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
    evidence: list[WorkerEvidence],
    *,
    teardown_ns: int | None,
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
            failure := build_failure(item, teardown_ns=teardown_ns, worker=worker, host=host, stalled=stalled)
        ) is not None
    ]
    return order_failures(failures)


def is_recoverable(failures: list[WorkerFailure]) -> bool:
    """Retry when the root cause asked for it, or when only victims were seen in this pod.

    A pod that saw only victims lost a peer elsewhere (another pod's failure, a preempted node):
    retrying is what torch elastic itself would do, and the true cause is reported by that pod.
    """
    if not failures:
        return False
    root = failures[0]
    return root.recoverable or root.role == Role.VICTIM
