"""Collect, after a failed launch, what the agent knows about each worker of the last attempt.

Sources: the launch observer (pids, ranks, error-file paths, teardown time), the death watcher
(exact exit times and statuses), each worker's error file, kfpytorch's ``recoverable_error``
marker, and torch's ``ChildFailedError`` (its detection times, the least precise source).
"""

from __future__ import annotations

import os
from typing import Any

from flytekitplugins.kfpytorch.error_handling import RECOVERABLE_ERROR_FILE_NAME

from flytekitplugins_rootcause.agent.diagnosis.selection import Detection, WorkerEvidence
from flytekitplugins_rootcause.agent.launch_observer import LaunchObserver
from flytekitplugins_rootcause.worker.recorder import read_error_file


def detections_by_rank(child_failed: Any) -> dict[int, Detection]:
    """torch's per-rank ``ProcessFailure`` as ``Detection`` (empty when there is no error)."""
    failures = getattr(child_failed, "failures", None) or {}
    result: dict[int, Detection] = {}
    for rank, failure in failures.items():
        result[int(rank)] = Detection(
            timestamp_s=getattr(failure, "timestamp", None), exitcode=getattr(failure, "exitcode", None)
        )
    return result


def gather_evidence(observer: LaunchObserver, child_failed: Any = None) -> tuple[list[WorkerEvidence], int | None]:
    """Evidence for every worker of the last attempt, and that attempt's teardown time (ns)."""
    attempt = observer.last_attempt()
    if attempt is None:
        return [], None
    detections = detections_by_rank(child_failed)
    evidence = []
    for launched in observer.workers_of(attempt):
        error_dir = os.path.dirname(launched.error_file) if launched.error_file else ""
        evidence.append(
            WorkerEvidence(
                launched=launched,
                exit=observer.exit_of(launched),
                recorded=read_error_file(launched.error_file) if launched.error_file else None,
                detection=detections.get(launched.global_rank) if launched.global_rank is not None else None,
                recoverable_marker=bool(error_dir)
                and os.path.exists(os.path.join(error_dir, RECOVERABLE_ERROR_FILE_NAME)),
                torch_exitcode=observer.torch_exitcode(launched),
                exited_without_result=observer.exited_without_result(launched),
                probe=observer.probe_of(launched),
            )
        )
    return evidence, observer.teardown_ns(attempt)
