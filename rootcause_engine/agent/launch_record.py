"""One immutable record of a launch attempt: the facts the diagnosis is made from.

Why: a failure reaches the diagnosis by several roads. Torch reports a failed worker, the agent
loses its store, the watchdog finds the agent hung, a soft restart diagnoses what it may heal. Each
road could gather its own picture and answer "did this worker fail, and when" its own way. Instead
each takes a :class:`LaunchRecord` (:func:`record_launch`) to the one pipeline
(:mod:`.diagnosis.pipeline`). The questions are answered here, once. Reading a record touches no
torch state, so the watchdog can take one. Sources and rules: ``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from rootcause_core.ordering import TimeSource
from rootcause_core.timestamps import from_seconds
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.worker_probe import ProbeAnswer
from rootcause_engine.worker.recorder import RecordedError, read_error_file

#: The marker file kfpytorch's error handler writes next to a worker's error file when the
#: worker's exception was recoverable (``flytekitplugins.kfpytorch.error_handling``, checked
#: against kfpytorch by ``tests/test_upstream_seams.py``); named here so the engine needs no kfpytorch.
RECOVERABLE_MARKER_FILE_NAME = "recoverable_error"


@dataclasses.dataclass(frozen=True)
class Detection:
    """What torch's agent reported for a worker (``ProcessFailure``), the least precise source."""

    timestamp_s: int | None
    exitcode: int | None


@dataclasses.dataclass(frozen=True)
class WorkerRecord:
    """Everything the agent knows about one worker of an attempt."""

    launched: LaunchedWorker
    exit: ProcessExit | None
    recorded: RecordedError | None
    detection: Detection | None = None
    recoverable_marker: bool = False
    torch_exitcode: int | None = None  # from torch's process handle; negative N: signal N
    exited_without_result: bool = False  # a function worker that exited 0 before returning
    probe: ProbeAnswer | None = None  # its answer when probed before the teardown (it was alive)

    def exit_status(self) -> tuple[int | None, int | None]:
        """(exit code, signal number): the watcher's reading, else torch's process handle, else detection."""
        if self.exit is not None and (self.exit.exitcode is not None or self.exit.signal_number):
            return self.exit.exitcode, self.exit.signal_number
        code = self.torch_exitcode
        if code is None and self.detection is not None:
            code = self.detection.exitcode
        if code is not None and code < 0:  # torch's handles report death by signal N as -N
            return None, -code
        return code, None

    @property
    def failed(self) -> bool:
        """It recorded an exception, died by a signal, exited non-zero, or exited before returning."""
        exitcode, signal_number = self.exit_status()
        if self.recorded is not None or signal_number is not None or self.exited_without_result:
            return True
        if exitcode is not None:
            return exitcode != 0
        return self.detection is not None

    def failure_time(self) -> tuple[int | None, TimeSource]:
        """When it failed, from the most precise source there is, and which source that was."""
        if self.recorded is not None and self.recorded.timestamp_ns is not None:
            return self.recorded.timestamp_ns, TimeSource.RECORDED
        if self.exit is not None:
            return self.exit.exit_ns, TimeSource.OBSERVED
        if self.detection is not None and self.detection.timestamp_s is not None:
            return from_seconds(self.detection.timestamp_s), TimeSource.DETECTED
        return None, TimeSource.UNKNOWN


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """The last attempt of a launch, at one moment: its workers and the agent's teardown times (ns).

    ``teardown_ns``: when the agent began ending the workers (the report's timeline);
    ``signals_ns``: when its first termination signal went out, after any probe (the roles).
    """

    attempt: int | None
    workers: tuple[WorkerRecord, ...]
    teardown_ns: int | None = None
    signals_ns: int | None = None
    teardown_done_ns: int | None = None
    taken_ns: int = 0

    @property
    def failed_workers(self) -> tuple[WorkerRecord, ...]:
        return tuple(worker for worker in self.workers if worker.failed)

    @property
    def first_failure_ns(self) -> int | None:
        return min((t for w in self.failed_workers if (t := w.failure_time()[0]) is not None), default=None)

    @property
    def exits_ns(self) -> tuple[int, ...]:
        return tuple(worker.exit.exit_ns for worker in self.workers if worker.exit is not None)


def detections_by_rank(child_failed: Any) -> dict[int, Detection]:
    """torch's per-rank ``ProcessFailure`` as ``Detection`` (empty when there is no error)."""
    failures = getattr(child_failed, "failures", None) or {}
    return {
        int(rank): Detection(getattr(failure, "timestamp", None), getattr(failure, "exitcode", None))
        for rank, failure in failures.items()
    }


def _has_recoverable_marker(error_file: str) -> bool:
    error_dir = os.path.dirname(error_file) if error_file else ""
    return bool(error_dir) and os.path.exists(os.path.join(error_dir, RECOVERABLE_MARKER_FILE_NAME))


def record_launch(observer: LaunchObserver, child_failed: Any = None, *, ask_kernel: bool = False) -> LaunchRecord:
    """The record of the launch's last attempt (no workers when none was started).

    ``child_failed``: torch's ``ChildFailedError``, when torch reported the failure. ``ask_kernel``:
    confirm each worker's exit with the kernel first (the watchdog: its watcher thread may be
    starved); the diagnosis after a teardown needs not, the teardown confirmed every exit.
    """
    ledger, ends = observer.ledger, observer.ends
    attempt = ledger.last_attempt()
    if attempt is None:
        return LaunchRecord(None, (), taken_ns=time.time_ns())
    detections = detections_by_rank(child_failed)
    workers = []
    for launched in ledger.workers_of(attempt):
        exit_ = observer.watcher.confirm_exit(*launched.process) if ask_kernel else ends.exit_of(launched)
        # torch's handle polls (and so reaps) its process: asked only for an exit the watcher saw
        # without a status, or, after a teardown, for a worker the watcher never saw end
        read_handle = exit_.exitcode is None if exit_ is not None else not ask_kernel
        workers.append(
            WorkerRecord(
                launched=launched,
                exit=exit_,
                recorded=read_error_file(launched.error_file) if launched.error_file else None,
                detection=detections.get(launched.global_rank) if launched.global_rank is not None else None,
                recoverable_marker=_has_recoverable_marker(launched.error_file),
                torch_exitcode=ends.torch_exitcode(launched) if read_handle else None,
                exited_without_result=ends.exited_without_result(launched),
                probe=observer.teardown.probe_of(launched),
            )
        )
    moments = ledger.teardown_of(attempt)
    return LaunchRecord(
        attempt=attempt,
        workers=tuple(workers),
        teardown_ns=moments.began_ns,
        signals_ns=moments.signals_ns,
        teardown_done_ns=moments.done_ns,
        taken_ns=time.time_ns(),
    )
