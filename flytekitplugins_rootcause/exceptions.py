"""Timestamped Flyte exceptions that carry the chosen root cause and every other failure.

They subclass flytekit's own exceptions, so ``pyflyte-execute`` (and the patched entrypoint) map
them to the right ``ContainerError`` kind, and the Flyte timestamp is the root cause's time with
sub-second precision. The exact nanosecond time stays available as ``timestamp_ns``.

This is the flytekit front-end's side of the engine's diagnosis: :func:`root_cause_error` turns a
:class:`~rootcause_engine.agent.diagnosis.pipeline.Diagnosis` into the exception a task raises
(and the agent watchdog hands to the entrypoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from flytekit.exceptions.system import FlyteSystemException
from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException

from rootcause_core.testimony import LostPod, Member
from rootcause_engine.agent.diagnosis.failures import WorkerFailure

if TYPE_CHECKING:  # the pipeline needs torch; the entrypoint, which imports these classes, must not
    from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
    from rootcause_engine.agent.rank_0_outputs import MissingRank0Outputs


class RootCauseDetails:
    """Mixin: the failures behind the exception, root cause first, and what the pod knows of its peers
    (the attempt's members, and the peers it found lost; see ``agent.peer_watch``)."""

    failures: tuple[WorkerFailure, ...]
    _report: str
    #: The engine's diagnosis the error was made from (``None`` for one built by hand).
    diagnosis: Diagnosis | None = None
    members: tuple[Member, ...] = ()
    lost_pods: tuple[LostPod, ...] = ()
    #: the pod the failing pods agreed holds the job's root cause, when it is another pod than this
    #: one (``agent.agreement``): this pod's document then leaves the console's answer to that pod's
    agreed_worker: str | None = None

    @property
    def root_cause(self) -> WorkerFailure:
        return self.failures[0]

    @property
    def timestamp_ns(self) -> int | None:
        return self.root_cause.timestamp_ns

    @property
    def report(self) -> str:
        """The root-cause report: its first line starts with the role marker (see ``report.py``)."""
        return self._report

    def __init__(
        self,
        message: str,
        failures: Sequence[WorkerFailure],
        *,
        members: Sequence[Member] = (),
        lost_pods: Sequence[LostPod] = (),
    ) -> None:
        if not failures:
            raise ValueError("a root-cause error needs at least one failure")
        self.failures = tuple(failures)
        self._report = message
        self.members, self.lost_pods = tuple(members), tuple(lost_pods)
        # then flytekit's exception (next in the subclass's MRO), stamped with the root cause's time
        super().__init__(self._flyte_value(message), timestamp=self.root_cause.timestamp_s)  # type: ignore[call-arg]

    @staticmethod
    def _flyte_value(message: str) -> object:
        """What the Flyte exception is built from (each subclass's own)."""
        raise NotImplementedError


class ElasticRootCauseRecoverableError(RootCauseDetails, FlyteRecoverableException):
    """The root cause was recoverable (a ``FlyteRecoverableException``, or only victims were seen)."""

    @staticmethod
    def _flyte_value(message: str) -> object:
        return message


class ElasticRootCauseError(RootCauseDetails, FlyteUserRuntimeException):
    """The root cause was not recoverable; Flyte will not retry on it."""

    @staticmethod
    def _flyte_value(message: str) -> object:
        return RuntimeError(message)  # a user error wraps the exception it reports


class AgentHungError(FlyteSystemException):
    """The agent hung although no worker failed (every worker exited successfully): retryable."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        self.report = diagnosis.report
        super().__init__(diagnosis.report)


class Rank0OutputsMissingError(FlyteRecoverableException):
    """The launch succeeded, but the pod holding global rank 0 wrote neither the task's outputs nor an
    error document in time (it died or vanished after training): raised by a pod without rank 0, which
    would otherwise exit 0 and let the job read as succeeded with its outputs missing. Recoverable:
    the training itself did not fail, so a retry may well succeed
    (:mod:`flytekitplugins_rootcause.rank_0_outputs`)."""

    def __init__(self, missing: MissingRank0Outputs) -> None:
        super().__init__(missing.message)
        self.missing = missing


def root_cause_error(diagnosis: Diagnosis) -> ElasticRootCauseError | ElasticRootCauseRecoverableError | AgentHungError:
    """The Flyte exception for ``diagnosis``: recoverable where its root cause is (or only victims
    failed here), a system error for a hung agent without a failed worker."""
    if not diagnosis.failures:
        return AgentHungError(diagnosis)
    kind = ElasticRootCauseRecoverableError if diagnosis.recoverable else ElasticRootCauseError
    error = kind(diagnosis.report, diagnosis.failures, members=diagnosis.members, lost_pods=diagnosis.lost_pods)
    error.diagnosis = diagnosis
    return error
