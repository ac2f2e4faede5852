"""The straggler check in a flytekit task's workers: the report as a Deck, ``fail`` as a flytekit user error.

The check and its actions are the engine's (:mod:`rootcause_engine.straggler.worker`).
"""

from __future__ import annotations

import dataclasses

from rootcause_engine.straggler.measure import TrialRunner, run_trial
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck
from rootcause_engine.straggler.worker import StragglerCheckHook
from rootcause_engine.straggler.worker import run_straggler_check_in_worker as run_in_worker


@dataclasses.dataclass(frozen=True)
class FlytekitStragglerFrontEnd:
    """Rank 0 adds the Deck; ``action='fail'`` raises ``StragglerDetectedError`` (not recoverable)."""

    def publish(self, report: StragglerReport) -> None:
        from flytekitplugins_rootcause.straggler.report import publish_deck

        publish_deck(report)

    def detected_error(self, report: StragglerReport, reason: str) -> BaseException:
        from flytekitplugins_rootcause.straggler.exceptions import StragglerDetectedError

        return StragglerDetectedError(report, reason)


def run_straggler_check_in_worker(
    check: StragglerCheck, *, nnodes: int | str | None = None, runner: TrialRunner = run_trial
) -> StragglerReport:
    """Run the check in this torch elastic worker of a flytekit task, report it, and act on it
    (``rootcause_engine.straggler.worker.run_straggler_check_in_worker``)."""
    return run_in_worker(check, FlytekitStragglerFrontEnd(), nnodes=nnodes, runner=runner)


def straggler_check_hook(check: StragglerCheck, nnodes: int | str | None) -> StragglerCheckHook:
    """The worker hook of ``ElasticRootCause(straggler_check=...)`` on flytekit."""
    return StragglerCheckHook(check, FlytekitStragglerFrontEnd(), nnodes=nnodes)
