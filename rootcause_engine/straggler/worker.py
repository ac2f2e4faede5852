"""``run_straggler_check_in_worker``: the one call a worker makes before the user's function.

Front-end-free: where the report is shown (flytekit's Deck, Flyte 2's report) and what a failed
check raises (each front-end's non-retryable user error) are the caller's :class:`StragglerFrontEnd`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Protocol

from rootcause_engine.straggler.actions import EXCLUDE_RESTART_EXIT_CODE, Plan, Step, plan_action
from rootcause_engine.straggler.check import run_check
from rootcause_engine.straggler.measure import TrialRunner, run_trial
from rootcause_engine.straggler.report import StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck

logger = logging.getLogger("rootcause_engine.straggler")


class StragglerFrontEnd(Protocol):
    """What a front-end gives the check: where rank 0 shows the report, and the error of ``action='fail'``."""

    def publish(self, report: StragglerReport) -> None: ...

    def detected_error(self, report: StragglerReport, reason: str) -> BaseException: ...

#: How long an excluded worker waits for its agent's SIGTERM teardown before exiting on its own.
LEAVE_GRACE_S = 60.0


def _ensure_log_handler() -> None:
    """Make the report visible in the pod log: worker processes often have no logging set up, or
    only a root logger at WARNING (a record propagates to the root's handlers whatever the root's
    own level, so our logger's INFO level is what decides)."""
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def run_straggler_check_in_worker(
    check: StragglerCheck,
    front_end: StragglerFrontEnd,
    *,
    nnodes: int | str | None = None,
    runner: TrialRunner = run_trial,
) -> StragglerReport:
    """Run the check in this torch elastic worker, report it, and act on it (all workers call this).

    Inits a process group if none exists and destroys it afterwards, so the user's own
    ``init_process_group`` works as before. Rank 0 logs the table and publishes the report through
    ``front_end``. Then: ``warn`` returns; ``fail`` raises the front-end's error on every worker
    (before training);
    ``exclude`` makes flagged pods leave and healthy ones restart (see ``actions.py``); this
    function then does not return. ``nnodes`` is the task's setting (default: ``PET_NNODES``),
    needed by ``exclude`` only. ``runner`` runs each compute trial (a harness such as ``simulate.py``
    wraps it to make a simulated node's device slower; the default runs the trial as it is).
    """
    _ensure_log_handler()
    report = run_check(check, runner)
    rank = int(os.environ["RANK"])
    node_rank = int(os.environ["GROUP_RANK"])
    if rank == 0:
        level = logging.WARNING if report.flagged else logging.INFO
        logger.log(level, "%s", report.table())
        try:
            front_end.publish(report)
        except Exception:  # the page is a view: showing it must never stop the check's action
            logger.exception("could not publish the straggler report")
    plan = plan_action(
        report,
        check,
        node_rank=node_rank,
        nnodes=nnodes if nnodes is not None else os.environ.get("PET_NNODES"),
        restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        max_restarts=int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")),
    )
    _carry_out(plan, report, front_end.detected_error)
    return report


def _carry_out(
    plan: Plan, report: StragglerReport, detected_error: Callable[[StragglerReport, str], BaseException]
) -> None:
    if plan.step is Step.CONTINUE:
        if report.flagged:
            note = f", {plan.reason}" if plan.reason else ""
            logger.warning("%s; training goes on (action=%s%s)", report.summary(), report.action, note)
        return
    if plan.step is Step.FAIL:
        raise detected_error(report, plan.reason)
    if plan.step is Step.RESTART:
        logger.warning("%s; %s (exit code %d)", report.summary(), plan.reason, EXCLUDE_RESTART_EXIT_CODE)
        sys.exit(EXCLUDE_RESTART_EXIT_CODE)
    logger.warning("%s; %s", report.summary(), plan.reason)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(LEAVE_GRACE_S)
    sys.exit(EXCLUDE_RESTART_EXIT_CODE)


@dataclasses.dataclass(frozen=True)
class StragglerCheckHook:
    """The check as a worker hook of ``ElasticRootCause(straggler_check=...)`` (either front-end):
    picklable, run in every worker inside the front-end's execution context right before the user's
    function. ``front_end``: a picklable :class:`StragglerFrontEnd`."""

    check: StragglerCheck
    front_end: StragglerFrontEnd
    nnodes: int | str | None = None

    def __call__(self) -> None:
        run_straggler_check_in_worker(self.check, self.front_end, nnodes=self.nnodes)
