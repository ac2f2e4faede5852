"""Agent side: the teardown policy of a launch: whom to ask where they are, then how to end them.

Why here and not in torch: torch's own teardown waits a hard-coded 30 s between SIGTERM and SIGKILL
in its join, needs the agent's thread (which the agent watchdog may find stuck), and reaps as it
goes. This policy is the one teardown of the join wrapper, the agent watchdog, the hang watch and
the peer watch's verdicts: the configured grace, a probe first where it tells the diagnosis
something (a peer's hang), and every moment written in the :class:`~.launch_ledger.LaunchLedger`.
No lock of its own: the probes' answers, written by whichever thread tears down and read by the
diagnosis, change by one dictionary operation at a time (atomic in CPython).
"""

from __future__ import annotations

import logging
import os
import signal

from rootcause_core.roles import Role, classify_role, is_victim_message
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger
from rootcause_engine.agent.teardown import terminate_then_kill
from rootcause_engine.agent.worker_probe import ProbeAnswer, probe_workers
from rootcause_engine.worker.recorder import read_error_file

logger = logging.getLogger(__name__)

#: torch's own grace between SIGTERM and SIGKILL, used when none is configured.
TORCH_GRACE_S = 30.0


class WorkerTeardown:
    """Ends an attempt's live workers (probed first where that helps) and keeps the probes' answers."""

    def __init__(
        self, ledger: LaunchLedger, *, teardown_grace_s: float | None = None, probe_before_teardown: bool = False
    ) -> None:
        self.ledger = ledger
        self.teardown_grace_s = teardown_grace_s
        self.probe_before_teardown = probe_before_teardown
        self._probes: dict[int, ProbeAnswer] = {}

    def end_workers(self, attempt: int, *, probe: bool = False, grace_s: float | None = None) -> None:
        """End every live worker of ``attempt``: SIGTERM, the grace, SIGKILL (``teardown.terminate_then_kill``).

        Probed first where that helps (:meth:`probe_live_workers`; ``probe``: another pod's failure
        ended this one's workers). ``grace_s``: a shorter grace than the configured one, where the
        workers cannot use it (they wait in a collective for a peer that is gone).

        A worker still unwinding after recording a failure of its own (:func:`failed_on_its_own`)
        gets its SIGTERM only if it has not exited by itself within ``teardown.spare_s`` (at most
        2 s): a SIGTERM would make a root cause's exit read as the teardown's signal instead of its
        own exit code (or run a handler inherited from the agent with ``fork`` in the middle of
        torch's traceback pickle). One that recorded a victim's error is ended at once, as torch
        ends it. Exits are read from the kernel without reaping (never through torch's handles,
        whose ``is_alive`` reaps), so torch's join still collects every worker and the watcher still
        reads each status.
        """
        ledger, watcher = self.ledger, self.ledger.watcher
        ledger.note_teardown(attempt)
        self.probe_live_workers(attempt, asked=probe)
        grace = TORCH_GRACE_S if self.teardown_grace_s is None else self.teardown_grace_s
        grace = grace if grace_s is None else min(grace, grace_s)
        exited = lambda pid: watcher.confirm_exit(pid) is not None  # noqa: E731
        ledger.note_signals(attempt)
        workers = [worker for worker in ledger.workers_of(attempt) if not exited(worker.pid)]
        live = [worker.pid for worker in workers]
        unwinding = [worker.pid for worker in workers if failed_on_its_own(worker)]
        logger.warning("ending %d live workers (SIGTERM, %g s, SIGKILL; %d unwinding first left to exit)",
                       len(live), grace, len(unwinding))
        stuck = terminate_then_kill(live, grace_s=grace, exited=exited, spared=unwinding)
        if stuck:
            logger.error("workers %s did not exit after SIGKILL (uninterruptible sleep?)", stuck)
        ledger.note_teardown_done(attempt)

    def probe_live_workers(self, attempt: int, *, asked: bool = False) -> None:
        """Ask ``attempt``'s live workers where they are (``worker_probe``), once, before they are ended.

        Only with ``probe_before_teardown``, and only when ``asked`` (another pod's failure ended
        this one's workers) or a worker of the attempt failed the way a peer's hang shows
        (:meth:`stall_suspected`): a failure that names its own cause costs the teardown nothing.
        The answers are kept for the diagnosis (:meth:`probe_of`). A worker that recorded its error
        is not asked: its failure is known, and it may be shutting its interpreter down, which
        restores the signal's default action (death by the probe).
        """
        if not self.probe_before_teardown or not (asked or self.stall_suspected(attempt)):
            return
        answered = set(self._probes)
        live = [
            (worker.pid, worker.error_file)
            for worker in self.ledger.workers_of(attempt)
            if worker.pid not in answered
            and not (worker.error_file and os.path.exists(worker.error_file))
            and self.ledger.watcher.confirm_exit(*worker.process) is None
        ]
        if not live:
            return
        self._probes.update(probe_workers(live))

    def stall_suspected(self, attempt: int) -> bool:
        """A worker of ``attempt`` failed as a peer's hang makes it fail: a collective timeout it
        recorded, or a victim's error (gloo closes a pair that timed out, so the peers of the rank
        that timed out see "connection closed"), or SIGABRT with nothing recorded (NCCL's watchdog
        on a timed-out collective)."""
        for worker in self.ledger.workers_of(attempt):
            recorded = read_error_file(worker.error_file) if worker.error_file else None
            if recorded is not None:
                if is_victim_message(recorded.message):  # a collective timeout is one too
                    return True
                continue
            exit_ = self.ledger.watcher.exit_of(*worker.process)
            if exit_ is not None and exit_.signal_number == signal.SIGABRT:
                return True
        return False

    def probe_of(self, worker: LaunchedWorker) -> ProbeAnswer | None:
        """What ``worker`` answered when probed before the teardown, if it was and did."""
        return self._probes.get(worker.pid)


def failed_on_its_own(worker: LaunchedWorker) -> bool:
    """``worker`` recorded a failure that the diagnosis could name as the root cause (not a victim's
    error: a peer gone, a collective timed out), so its own exit is worth waiting for."""
    recorded = read_error_file(worker.error_file) if worker.error_file else None
    return recorded is not None and classify_role(
        exception_types=recorded.exception_mro, message=recorded.message) is Role.CANDIDATE
