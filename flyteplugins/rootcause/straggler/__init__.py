"""The straggler pre-check in a Flyte 2 task's workers (``ElasticRootCause(straggler_check=...)``).

The check, its verdict and its actions are the engine's (:mod:`rootcause_engine.straggler`), as on
flytekit. What differs is the front-end:

- where the report goes (with ``report=True``): rank 0 logs it to the "Straggler check" tab of
  its own copy of the report and flushes it, as Flyte 2 means distributed tasks' workers to (the
  ``a0`` process flushes its report at the end only if it has content of its own, so as not to
  overwrite the workers'; a tab rank 0's user function logs later joins it). When the ``a0`` process
  must flush its own report after all (the failure timeline, the soft restarts), it reads the page back
  and keeps every tab flushed there (:func:`flyteplugins.rootcause.report.keep_flushed_tabs`). Rank 0
  also leaves the report in a file of its pod, from which the task adds the tab to that flush too: the
  tab survives where the page could not be read back;
- what ``action="fail"`` raises in every worker: :class:`StragglerDetectedError`, a Flyte 2
  ``NonRecoverableError``, since a retry would most likely land on the same slow hardware. The
  agreed root cause is then that error (``error.pb`` kind ``NON_RECOVERABLE``).
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
