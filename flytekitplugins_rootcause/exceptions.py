"""Timestamped Flyte exceptions that carry the chosen root cause and every other failure.

They subclass flytekit's own exceptions, so ``pyflyte-execute`` (and the patched entrypoint) map
them to the right ``ContainerError`` kind, and the Flyte timestamp is the root cause's time with
sub-second precision. The exact nanosecond time stays available as ``timestamp_ns``.
"""

from __future__ import annotations

from collections.abc import Sequence

from flytekit.exceptions.user import FlyteRecoverableException, FlyteUserRuntimeException

from flytekitplugins_rootcause.agent.diagnosis.failures import WorkerFailure


class RootCauseDetails:
    """Mixin: the failures behind the exception, root cause first."""

    failures: tuple[WorkerFailure, ...]
    _report: str

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


class ElasticRootCauseRecoverableError(RootCauseDetails, FlyteRecoverableException):
    """The root cause was recoverable (a ``FlyteRecoverableException``, or only victims were seen)."""

    def __init__(self, message: str, failures: Sequence[WorkerFailure]) -> None:
        if not failures:
            raise ValueError("a root-cause error needs at least one failure")
        self.failures = tuple(failures)
        self._report = message
        super().__init__(message, timestamp=self.root_cause.timestamp_s)


class ElasticRootCauseError(RootCauseDetails, FlyteUserRuntimeException):
    """The root cause was not recoverable; Flyte will not retry on it."""

    def __init__(self, message: str, failures: Sequence[WorkerFailure]) -> None:
        if not failures:
            raise ValueError("a root-cause error needs at least one failure")
        self.failures = tuple(failures)
        self._report = message
        super().__init__(RuntimeError(message), timestamp=self.root_cause.timestamp_s)
