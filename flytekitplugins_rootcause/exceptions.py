"""Timestamped Flyte exceptions that carry the chosen root cause and every other failure.

They subclass flytekit's own exceptions, so ``pyflyte-execute`` (and the patched entrypoint) map
them to the right ``ContainerError`` kind, and the Flyte timestamp is the root cause's time with
sub-second precision. The exact nanosecond time stays available as ``timestamp_ns``.
"""

from __future__ import annotations

from collections.abc import Sequence

from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException

from flytekitplugins_rootcause.agent.diagnosis.failures import WorkerFailure
from rootcause_core.testimony import LostPeer, Member


class RootCauseDetails:
    """Mixin: the failures behind the exception, root cause first, and what the pod knows of its peers
    (the attempt's members, and the peers it found lost; see ``agent.peer_watch``)."""

    failures: tuple[WorkerFailure, ...]
    _report: str
    members: tuple[Member, ...] = ()
    lost_peers: tuple[LostPeer, ...] = ()

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
        lost_peers: Sequence[LostPeer] = (),
    ) -> None:
        if not failures:
            raise ValueError("a root-cause error needs at least one failure")
        self.failures = tuple(failures)
        self._report = message
        self.members, self.lost_peers = tuple(members), tuple(lost_peers)
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
