"""The straggler pre-check in a Flyte 2 task's workers (``ElasticRootCause(straggler_check=...)``).

The check, its verdict and its actions are the engine's (:mod:`rootcause_engine.straggler`), as on
flytekit. Only the front-end differs. Flyte 2's report is flushed by each process, and a later flush
replaces an earlier one. So rank 0 flushes the "Straggler check" tab itself and also leaves it in a
file for the task's final flush. And ``action="fail"`` raises :class:`StragglerDetectedError`, a
``NonRecoverableError``, since a retry would most likely land on the same slow hardware.
``docs/flyte2.md`` has the details.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from flyte.errors import NonRecoverableError

from flyteplugins.rootcause.report import flush_straggler_tab
from rootcause_engine.straggler.report import StragglerReport, report_from_dict
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_engine.straggler.worker import StragglerCheckHook
from rootcause_engine.worker.complete_files import write_complete

logger = logging.getLogger(__name__)

#: ``ContainerError.code`` of a check that flagged nodes under ``action="fail"``.
STRAGGLER_ERROR_CODE = "StragglerDetected"


class StragglerDetectedError(NonRecoverableError):
    """``action="fail"`` and the check flagged nodes: stop before training, without a retry."""

    def __init__(self, report: StragglerReport, reason: str = "") -> None:
        self.report = report
        super().__init__(report.failure_message(reason), code=STRAGGLER_ERROR_CODE)


@dataclasses.dataclass(frozen=True)
class Flyte2StragglerFrontEnd:
    """Rank 0 writes the report to ``report_file`` and, where the task has a report (``in_report``),
    flushes it in its tab; ``fail`` raises :class:`StragglerDetectedError`. Picklable: it travels to
    spawned workers with the hook."""

    report_file: str
    in_report: bool = False

    def publish(self, report: StragglerReport) -> None:
        write_complete(self.report_file, json.dumps(dataclasses.asdict(report)))
        if self.in_report:
            flush_straggler_tab(report)

    def detected_error(self, report: StragglerReport, reason: str) -> BaseException:
        return StragglerDetectedError(report, reason)


def straggler_check_hook(
    check: StragglerCheck, nnodes: int | str, report_file: str, in_report: bool
) -> StragglerCheckHook:
    """The worker hook of ``ElasticRootCause(straggler_check=...)`` on Flyte 2."""
    return StragglerCheckHook(check, Flyte2StragglerFrontEnd(report_file, in_report), nnodes=nnodes)


def read_published_report(report_file: str) -> StragglerReport | None:
    """The report rank 0 of this pod's launch wrote, if it did (only the pod of rank 0 has one)."""
    path = Path(report_file)
    if not path.exists():
        return None
    try:
        return report_from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as error:  # a torn or foreign file: the tab is a view
        logger.warning("the straggler report in %s is unreadable (%s): no report tab", report_file, error)
        return None
