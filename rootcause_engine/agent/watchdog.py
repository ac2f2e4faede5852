"""Agent watchdog: a hung elastic agent still ends the pod, and still reports the root cause.

Why: torch's agent can get stuck after its workers failed. The pod then hangs until someone kills
it, and no error document is written. This watchdog looks at what the launch observer and the death
watcher know, never at torch's state. When the agent is hung past ``hang_timeout_s``, it ends the
workers, runs the one diagnosis pipeline, and hands the report to the failure sink
(:mod:`.failure_sink`). Then it exits. The rules and the exit code: ``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from rootcause_core.timestamps import from_seconds
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis, PeerTestimony, Trigger, agent_hung, diagnose
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.failure_sink import DEFAULT_SINK_TIMEOUT_S, deliver_last_resort
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.launch_record import WorkerRecord, record_launch
from rootcause_engine.thread_guard import Duty, GuardedLoop, LoopGuard

logger = logging.getLogger(__name__)

#: Exit status of a pod whose agent the watchdog ended without a written document (no sink, or its
#: writes failed): non-zero, and distinct in the pod status from an uncaught exception (1), a usage
#: error (2) and the entrypoint's failed error-file write (3). A pod whose document was written exits 0.
AGENT_HUNG_EXIT_CODE = 4
#: torch's ``LocalElasticAgent`` exit barrier (``launch_agent`` does not change it).
TORCH_EXIT_BARRIER_TIMEOUT_S = 300.0
#: torch's c10d rendezvous defaults, for configs that do not set them.
TORCH_RENDEZVOUS_JOIN_TIMEOUT_S = 600.0
TORCH_RENDEZVOUS_LAST_CALL_TIMEOUT_S = 30.0


def launch_watch() -> GuardedLoop:
    """The launch's one watch thread (not started): the watchdog's looks, and the hang watch's schedule
    (its looks run on the callback pool: the thread never waits for one). The launch session owns it;
    a watchdog or a hang watch used alone owns one of its own."""
    return GuardedLoop("rootcause-launch-watch")


def rendezvous_allowance_s(rdzv_configs: Mapping[str, Any] | None) -> float:
    """How long one rendezvous may legitimately take with these ``rdzv_configs``."""
    configs = rdzv_configs or {}

    def seconds(key: str, default: float) -> float:
        try:
            return float(configs.get(key, default))
        except (TypeError, ValueError):
            return default

    return seconds("join_timeout", TORCH_RENDEZVOUS_JOIN_TIMEOUT_S) + seconds(
        "last_call_timeout", TORCH_RENDEZVOUS_LAST_CALL_TIMEOUT_S
    )


@dataclasses.dataclass(frozen=True)
class WatchdogSettings:
    """How often to look, and how long each phase of the agent may go without finishing."""

    interval_s: float
    hang_timeout_s: float
    teardown_grace_s: float
    rendezvous_allowance_s: float = TORCH_RENDEZVOUS_JOIN_TIMEOUT_S + TORCH_RENDEZVOUS_LAST_CALL_TIMEOUT_S
    exit_barrier_allowance_s: float = TORCH_EXIT_BARRIER_TIMEOUT_S
    sink_timeout_s: float = DEFAULT_SINK_TIMEOUT_S


def watchdog_settings(config: Any) -> WatchdogSettings | None:
    """The watchdog settings of an ``ElasticRootCause`` config; ``None`` when it is switched off."""
    if not config.agent_watchdog:
        return None
    return WatchdogSettings(
        interval_s=config.agent_watchdog_interval_s,
        hang_timeout_s=config.agent_hang_timeout_s,
        teardown_grace_s=config.teardown_grace_s,
        rendezvous_allowance_s=rendezvous_allowance_s(config.rdzv_configs),
    )


@dataclasses.dataclass(frozen=True)
class AgentSnapshot:
    """What the watchdog knows about the last attempt at one moment (all times monotonic ns, this process's)."""

    now_ns: int
    workers: int
    exited: int
    first_failure_ns: int | None
    last_exit_ns: int | None
    rendezvous_since_ns: int | None
    exit_barrier_since_ns: int | None = None
    exit_barrier_left_ns: int | None = None


def hang_deadline_ns(snapshot: AgentSnapshot, settings: WatchdogSettings) -> int | None:
    """When the agent counts as hung, given what it is doing; ``None`` while nothing is expected of it."""
    hang_ns = from_seconds(settings.hang_timeout_s)
    if snapshot.workers == 0:
        return None  # first rendezvous: torch's own timeouts apply, and there is nothing to report
    if snapshot.rendezvous_since_ns is not None:
        return snapshot.rendezvous_since_ns + from_seconds(settings.rendezvous_allowance_s) + hang_ns
    if snapshot.exit_barrier_since_ns is not None:
        return snapshot.exit_barrier_since_ns + from_seconds(settings.exit_barrier_allowance_s) + hang_ns
    deadlines = []
    if snapshot.first_failure_ns is not None:
        deadlines.append(snapshot.first_failure_ns + hang_ns)
    if snapshot.exited == snapshot.workers and snapshot.last_exit_ns is not None:
        settled_ns = max(snapshot.last_exit_ns, snapshot.exit_barrier_left_ns or 0)
        deadlines.append(settled_ns + hang_ns)
    return min(deadlines, default=None)


def is_hung(snapshot: AgentSnapshot, settings: WatchdogSettings) -> bool:
    deadline = hang_deadline_ns(snapshot, settings)
    return deadline is not None and snapshot.now_ns >= deadline


def take_snapshot(
    observer: LaunchObserver, now_ns: int | None = None, *, failures_seen: dict[LaunchedWorker, int] | None = None
) -> AgentSnapshot:
    """Read the launch record with every exit confirmed by the kernel (never torch's monitor state,
    which a hung agent may hold); whether a worker failed is the record's answer.

    When, is the monotonic clock's: an exit's own monotonic stamp, else (a worker that recorded its
    failure and has not exited) the first look that saw it failed, kept in ``failures_seen`` across
    looks. Never the worker's recorded wall-clock time: a step since would move the deadline.
    """
    now = time.monotonic_ns() if now_ns is None else now_ns
    seen = {} if failures_seen is None else failures_seen
    record = record_launch(observer, ask_kernel=True)

    def known_since(worker: WorkerRecord) -> int:
        if worker.exit is not None and worker.exit.exit_mono_ns is not None:
            return worker.exit.exit_mono_ns
        return seen.setdefault(worker.launched, now)

    exits = [known_since(worker) for worker in record.workers if worker.exit is not None]
    return AgentSnapshot(
        now_ns=now,
        workers=len(record.workers),
        exited=len(exits),
        first_failure_ns=min((known_since(worker) for worker in record.failed_workers), default=None),
        last_exit_ns=max(exits, default=None),
        rendezvous_since_ns=observer.ledger.rendezvous_since_ns,
        exit_barrier_since_ns=observer.ledger.exit_barrier_since_ns,
        exit_barrier_left_ns=observer.ledger.exit_barrier_left_ns,
    )


def _describe_hang(snapshot: AgentSnapshot, settings: WatchdogSettings) -> str:
    if snapshot.rendezvous_since_ns is not None:
        phase = "stuck in a rendezvous past its time limit"
    elif snapshot.exit_barrier_since_ns is not None:
        phase = "stuck in its exit barrier past its time limit"
    elif snapshot.first_failure_ns is not None:
        phase = "stuck after a worker failed"
    else:
        phase = "stuck after every worker exited successfully"
    return (
        f"The elastic agent hung ({phase}; {snapshot.exited} of {snapshot.workers} workers of the last attempt "
        f"had exited): the agent watchdog ended the pod after {settings.hang_timeout_s:g} s without progress. "
        "Any worker still running then was terminated and is listed as a victim."
    )


class AgentWatchdog:
    """Ends a hung agent after reporting its root cause; a context manager around the launch."""

    def __init__(
        self,
        observer: LaunchObserver,
        settings: WatchdogSettings,
        *,
        error_of: Callable[[Diagnosis], BaseException],
        peers: PeerTestimony | None = None,
        retry_rule: RetryRule = RetryRule.ON_REQUEST,
        exit_process: Callable[[int], Any] = os._exit,
        loop: GuardedLoop | None = None,
    ) -> None:
        """``error_of`` turns the diagnosis into the front-end's exception (what the failure sink
        writes); ``peers``: the other pods, told and asked as on the normal failure path;
        ``retry_rule``: the front-end's, as for the launch's other diagnoses; ``loop``: the launch's
        watch thread its looks run on, started and stopped by its owner (``None``: one of its own)."""
        self.observer = observer
        self.retry_rule = retry_rule
        self.settings = settings
        self.error_of = error_of
        self.peers = peers
        self._exit_process = exit_process
        self._loop = loop if loop is not None else launch_watch()
        self._owns_loop = loop is None
        self._duty: Duty | None = None
        self._ended = False  # the launch is over: a look under way must not fire any more
        self._expedited: tuple[float, str, Trigger] | None = None  # (monotonic deadline, why, trigger)
        self._failures_seen: dict[LaunchedWorker, int] = {}  # take_snapshot's memory across looks
        #: a look that raised costs that look only (the watchdog is the pod's last guard against a
        #: hang); a thread that died anyway is logged and said in the report (:meth:`note`)
        self._looks = LoopGuard(
            "agent watchdog", stopped="a hung agent was no longer ended by it, nor reported by it")

    def __enter__(self) -> AgentWatchdog:
        self._ended = False
        self._duty = self._loop.every(self.settings.interval_s, self._look_once, guard=self._looks)
        if self._owns_loop:
            self._loop.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._ended = True
        if self._duty is not None:
            self._loop.drop(self._duty)
        if self._owns_loop:
            self._loop.stop(timeout_s=self.settings.interval_s + 1)

    def expedite(self, why: str, within_s: float, trigger: Trigger = Trigger.POD_LOST) -> None:
        """Fire ``within_s`` from now unless the launch ends first: something outside torch's view
        (a lost pod that hosted the rendezvous store) is known to leave torch's agent stuck."""
        self._expedited = (time.monotonic() + within_s, why, trigger)

    def note(self) -> str | None:
        """For the report: the watchdog's looks failed, or its thread died; ``None`` when neither."""
        return self._looks.note()

    def _look_once(self) -> None:
        """One :meth:`_look` per interval until it fired. A look that raises (never the agent's
        problem) costs that look only: a watchdog stopped by one bad look would leave a hung agent
        hanging for ever."""
        if self._look() and self._duty is not None:
            self._loop.drop(self._duty)

    def _look(self) -> bool:
        """One look; fire when the agent is hung (or an expedited deadline passed). Whether it fired."""
        snapshot = take_snapshot(self.observer, failures_seen=self._failures_seen)
        expedited = self._expedited
        due = expedited is not None and time.monotonic() >= expedited[0]
        if (due or is_hung(snapshot, self.settings)) and not self._ended:
            self.fire(snapshot, expedited if due else None)
            return True
        return False

    def fire(self, snapshot: AgentSnapshot, expedited: tuple[float, str, Trigger] | None = None) -> None:
        """End the surviving workers, report the root cause through the sink, exit the process.

        Whatever fails on the way (a bug, an unreadable error file), the process still exits: the
        watchdog exists so that the pod never hangs. ``expedited``: why it fires early, if it does.
        """
        note = _describe_hang(snapshot, self.settings) if expedited is None else expedited[1]
        trigger = Trigger.AGENT_HUNG if expedited is None else expedited[2]
        code = AGENT_HUNG_EXIT_CODE
        try:
            logger.critical("%s Writing the root cause and exiting.", note)
            self._end_survivors()
            error = self.error_of(self._diagnosis(note, trigger))
            delivery = deliver_last_resort(error, timeout_s=self.settings.sink_timeout_s)
            if delivery.written_to:
                logger.critical("root cause written to %s", delivery.written_to)
                code = 0
        except BaseException:
            logger.exception("agent watchdog could not report the root cause; exiting anyway")
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            self._exit_process(code)

    def _end_survivors(self) -> None:
        """Note teardown, then SIGTERM/grace/SIGKILL the last attempt's live workers (victims)."""
        attempt = self.observer.ledger.last_attempt()
        if attempt is not None:
            self.observer.teardown.end_workers(attempt)

    def _diagnosis(self, note: str, trigger: Trigger = Trigger.AGENT_HUNG) -> Diagnosis:
        """The pipeline's diagnosis of the last attempt; the hang itself when no worker failed."""
        notes = [note, looks] if (looks := self._looks.note()) else [note]  # the looks that failed before
        try:
            record = record_launch(self.observer)
            diagnosis = diagnose(record, trigger=trigger, peers=self.peers, notes=notes, retry_rule=self.retry_rule)
        except Exception:
            logger.exception("could not rank the workers' failures")
            diagnosis = None
        return diagnosis if diagnosis is not None else agent_hung("\n\n".join(notes), peers=self.peers)
