"""From what the agent observed to the exception that names the root cause.

One home for the two steps both the normal failure path (``task.py``, after torch reports the
failure) and the agent watchdog (``watchdog.py``, when torch never will) take: gather the evidence
of the last attempt and rank it (:func:`diagnose`), then build the timestamped Flyte exception
(:func:`root_cause_error`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

from flytekitplugins_rootcause.agent.diagnosis.evidence import gather_evidence
from flytekitplugins_rootcause.agent.diagnosis.failures import WorkerFailure
from flytekitplugins_rootcause.agent.diagnosis.report import format_agent_timeline, format_root_cause_message
from flytekitplugins_rootcause.agent.diagnosis.selection import WorkerEvidence, is_recoverable, rank_failures
from flytekitplugins_rootcause.agent.launch_observer import LaunchObserver
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from rootcause_core.collectives import CollectivePosition
from rootcause_core.testimony import LostPeer, Member, describe_lost_peer
from rootcause_core.worker_names import current_worker_name


def diagnose(observer: LaunchObserver, child_failed: Any = None) -> list[WorkerFailure]:
    """Every failure of the launch's last attempt, root cause first (empty when none failed)."""
    evidence, teardown_ns = gather_evidence(observer, child_failed)
    return rank_evidence(evidence, teardown_ns)


def rank_evidence(
    evidence: list[WorkerEvidence], teardown_ns: int | None, announced_stalls: tuple[CollectivePosition, ...] = ()
) -> list[WorkerFailure]:
    """``selection.rank_failures`` for this pod (its worker name and host)."""
    return rank_failures(
        evidence,
        teardown_ns=teardown_ns,
        worker=current_worker_name(),
        host=socket.gethostname(),
        announced_stalls=announced_stalls,
    )


def root_cause_error(
    failures: list[WorkerFailure],
    *,
    note: str | None = None,
    members: Sequence[Member] = (),
    lost_peers: Sequence[LostPeer] = (),
) -> ElasticRootCauseError | ElasticRootCauseRecoverableError:
    """The exception to raise for ranked failures (root cause first).

    ``note`` is appended to the report (the watchdog says there that the agent hung); the first
    line, which readers parse, stays the root cause's. ``lost_peers`` (peers found gone when this
    pod's workers failed as victims) get a paragraph of their own, and travel with ``members`` on
    the exception to the error document.
    """
    message = format_root_cause_message(failures)
    if lost_peers:
        noticed = failures[0].timestamp_ns or time.time_ns()
        message += "\n\n" + "\n".join(describe_lost_peer(peer, noticed_ns=noticed) for peer in lost_peers)
    if note:
        message += "\n\n" + note
    kind = ElasticRootCauseRecoverableError if is_recoverable(failures) else ElasticRootCauseError
    return kind(message, failures, members=members, lost_peers=lost_peers)


def agent_timeline(observer: LaunchObserver, failures: list[WorkerFailure]) -> str:
    """The report's line on when this pod's agent noticed, tore down and reported (``report.py``)."""
    attempt = observer.last_attempt()
    noticed = observer.teardown_ns(attempt) if attempt is not None else None
    ended = observer.teardown_done_ns(attempt) if attempt is not None else None
    root_ns = failures[0].timestamp_ns if failures else None
    return format_agent_timeline(root_ns, noticed, ended, time.time_ns())
