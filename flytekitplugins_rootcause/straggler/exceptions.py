"""Errors the straggler check raises where users see them."""

from __future__ import annotations

from flytekit.exceptions.user import FlyteUserRuntimeException

from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheckError, StragglerConfigError

__all__ = ["StragglerCheckError", "StragglerConfigError", "StragglerDetectedError"]


class StragglerDetectedError(FlyteUserRuntimeException):
    """``action='fail'`` and the check flagged nodes: stop before training (not recoverable).

    Not recoverable on purpose: a Flyte retry would most likely land on the same slow hardware.
    The message names every flagged node (pod, node rank, verdict) and says what to do.
    """

    def __init__(self, report: StragglerReport, reason: str = "") -> None:
        self.report = report
        super().__init__(RuntimeError(report.failure_message(reason)))
