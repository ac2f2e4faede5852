"""Agent side: watch this pod's workers while the job is healthy, and name one that hangs in a minute or
two. Without this, a rank that hangs is named only once its peers' collective times out: 10 to 60
minutes of an idle fleet. So every ``interval_s`` a look follows each local worker's beacon, CPU
time and I/O. It publishes this pod's long waits in the round's store. It reads every pod's waits
only while a local worker stands still. A worker still for the whole limit, while a peer waits for
it, goes to ``on_hung``. A healthy job costs one small store write per pod per round.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from rootcause_engine.agent.bounded_store import STORE_ERRORS
from rootcause_engine.agent.diagnosis.stalled_rank import (
    NoProgressVerdict,
    PeerWait,
    ProgressRule,
    ProgressTrack,
    stalled_rank_verdict,
    still_limit_s,
    waits_from_text,
    waits_of,
    waits_text,
)
from rootcause_engine.agent.launch_ledger import LaunchedWorker, LaunchLedger
from rootcause_engine.agent.peer_watch import PeerWatch, RoundStore
from rootcause_engine.agent.store_values import as_time_ns
from rootcause_engine.agent.watchdog import launch_watch
from rootcause_engine.agent.worker_progress import process_tree_usage
from rootcause_engine.settings import DEFAULT_HANG_IDLE_CPU_FRACTION, DEFAULT_IO_WAIT_AFTER_S
from rootcause_engine.thread_guard import Duty, GuardedLoop, LoopGuard, run_soon, wait_for
from rootcause_engine.worker.progress_beacon import BEACON_INTERVAL_S, BeaconReading, beacon_path, read_beacon

logger = logging.getLogger(__name__)

#: Seconds between two looks of the watch: as often as each worker's beacon beats.
WATCH_INTERVAL_S = BEACON_INTERVAL_S
#: A wait is published once it lasted this fraction of ``after_s`` (well before a peer needs it).
PUBLISH_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class HangSettings:
    """The hang watch's settings (``RootCauseSettings.hang_after_s``, ``hang_idle_cpu_fraction`` and
    ``io_wait_after_s``)."""

    after_s: float
    rule: ProgressRule = dataclasses.field(default_factory=ProgressRule)
    interval_s: float = WATCH_INTERVAL_S
    #: the limit of a rank whose main thread is blocked in a read or write (the longer of it and ``after_s``)
    io_wait_after_s: float = DEFAULT_IO_WAIT_AFTER_S


def hang_settings(config: Any) -> HangSettings | None:
    """The watch's settings for either front-end's config; ``None`` when it is off (``hang_after_s=None``)."""
    after_s = getattr(config, "hang_after_s", None)
    if after_s is None:
        return None
    fraction = getattr(config, "hang_idle_cpu_fraction", DEFAULT_HANG_IDLE_CPU_FRACTION)
    io_wait_after_s = getattr(config, "io_wait_after_s", DEFAULT_IO_WAIT_AFTER_S)
    return HangSettings(
        float(after_s), ProgressRule(idle_cpu_fraction=float(fraction)), io_wait_after_s=float(io_wait_after_s)
    )


@dataclasses.dataclass
class _Followed:
    """One local worker as the watch follows it."""

    worker: LaunchedWorker
    track: ProgressTrack
    beacon: BeaconReading | None = None


class HangWatch:
    """The watch of one launch (see the module docstring); a context manager around the launch.

    Its looks run on the callback pool (:func:`~rootcause_engine.thread_guard.run_soon`), scheduled
    every ``interval_s`` by the launch's watch thread (``loop``: the launch session's, shared with the
    agent watchdog; ``None``: one of its own), which never waits for a look and skips a turn while the
    previous look still runs."""

    def __init__(
        self,
        ledger: LaunchLedger,
        peers: PeerWatch | None,
        settings: HangSettings,
        *,
        on_hung: Callable[[dict[int, NoProgressVerdict]], None] | None = None,
        worker_name: str = "",
        loop: GuardedLoop | None = None,
    ) -> None:
        self.ledger = ledger
        self.peers = peers
        self.settings = settings
        self.on_hung = on_hung
        self.worker_name = worker_name
        #: the verdicts so far, by pid: written by the look under way, read by the session (replaced whole)
        self._found: dict[int, NoProgressVerdict] = {}
        self._followed: dict[int, _Followed] = {}
        self._published: tuple[int, int, int, str] | None = None  # (attempt, group rank, pods, text said)
        #: how long each wait of this pod had lasted when first published, kept while it is published
        self._published_s: dict[tuple[object, ...], float] = {}
        #: each peer wait read, by :meth:`PeerWait.identity`: its ``waited_s`` and when first read (monotonic)
        self._peer_seen: dict[tuple[object, ...], tuple[float, int]] = {}
        self._attempt: int | None = None
        self._loop = loop if loop is not None else launch_watch()
        self._owns_loop = loop is None
        self._duty: Duty | None = None
        self._look_under_way: concurrent.futures.Future[object] | None = None
        #: a look that raised costs that look only (logged once per kind); a thread that died anyway
        #: is logged and kept for the report (:meth:`note`). Two guards, for a guard is written by one
        #: thread at a time: the looks run on the pool, their scheduling on the launch watch's thread.
        stopped = "a rank that hung was no longer named before its peers' collective timed out"
        self._looks = LoopGuard("hang watch", stopped=stopped)
        self._scheduling = LoopGuard("hang watch", stopped=stopped)

    def found(self) -> dict[int, NoProgressVerdict]:
        """The verdicts reached so far, by worker pid."""
        return dict(self._found)

    def __enter__(self) -> HangWatch:
        self._duty = self._loop.every(self.settings.interval_s, self._schedule_look, guard=self._scheduling)
        if self._owns_loop:
            self._loop.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._duty is not None:
            self._loop.drop(self._duty)
        wait_for(self._look_under_way, self.settings.interval_s + 5)
        if self._owns_loop:
            self._loop.stop(timeout_s=self.settings.interval_s + 5)

    def note(self) -> str | None:
        """For the report: the watch's looks failed, or its thread died; ``None`` when neither."""
        notes = [note for note in (self._scheduling.note(), self._looks.note()) if note]
        return " ".join(notes) or None

    def _schedule_look(self) -> None:
        """One :meth:`look` on the pool, unless the previous one still runs; one that raises costs that
        look only (the watch must never take the agent down, nor stop at its first bad look)."""
        if self._look_under_way is None or self._look_under_way.done():
            self._look_under_way = run_soon(lambda: self._looks.run(self.look), name="hang watch")

    # --- one look ------------------------------------------------------------------------------

    def look(self) -> dict[int, NoProgressVerdict]:
        """One look at the running attempt's workers; the verdicts it reached (by pid)."""
        workers = self._live_workers()
        if not workers:
            return {}
        local_waits = [
            wait
            for item in workers
            if item.beacon is not None and item.worker.global_rank is not None
            for wait in waits_of(item.worker.global_rank, self.worker_name, item.beacon)
        ]
        store = self.peers.round_store() if self.peers is not None else None
        self._publish(store, local_waits, time.time_ns(), time.monotonic_ns())
        after_s, io_after_s = self.settings.after_s, self.settings.io_wait_after_s
        watched = [
            item for item in workers
            if item.track.still_s >= PUBLISH_FRACTION * still_limit_s(item.track, after_s, io_after_s)
            and item.beacon is not None and item.worker.global_rank is not None
        ]
        if not watched:
            return {}
        waits = [*local_waits, *self._peer_waits(store)]
        now_ns, now_mono_ns = time.time_ns(), time.monotonic_ns()
        found = {
            item.worker.pid: verdict
            for item in watched
            if (verdict := stalled_rank_verdict(
                item.worker.global_rank, item.beacon, item.track, waits, after_s=after_s, now_ns=now_ns,
                io_wait_after_s=io_after_s, now_mono_ns=now_mono_ns,
            )) is not None
        }
        if found:
            self._hung(found)
        return found

    def _live_workers(self) -> list[_Followed]:
        """The running attempt's live workers, each looked at now (none once its teardown began)."""
        attempt = self.ledger.last_attempt()
        if attempt is None or self.ledger.teardown_of(attempt).began_ns is not None:
            return []
        self._attempt = attempt
        looked = []
        for worker in self.ledger.workers_of(attempt):
            if self.ledger.watcher.exit_of(worker.pid) is not None or not worker.error_file:
                continue
            usage = process_tree_usage(worker.pid)
            if usage is None:
                continue
            beacon = read_beacon(beacon_path(worker.error_file))
            if beacon is not None and beacon.pid != worker.pid:
                beacon = None  # a previous worker's file, not this one's yet
            own, position = (beacon.written_bytes, beacon.position()) if beacon is not None else (0, None)
            known = self._followed.get(worker.pid)
            track = (
                ProgressTrack.start(usage, own, position) if known is None
                else known.track.advanced(usage, own, self.settings.rule, position)
            )
            self._followed[worker.pid] = item = _Followed(worker, track, beacon)
            looked.append(item)
        live = {item.worker.pid for item in looked}
        self._followed = {pid: item for pid, item in self._followed.items() if pid in live}
        return looked

    def _hung(self, found: dict[int, NoProgressVerdict]) -> None:
        new = {pid: verdict for pid, verdict in found.items() if pid not in self._found}
        self._found = {**self._found, **new}
        if not new:
            return
        for pid, verdict in new.items():
            worker = self._followed[pid].worker
            logger.error("hang watch: rank %s (local rank %d, pid %d) is hung: it %s; ending this pod's workers",
                         worker.global_rank, worker.local_rank, pid, verdict.summary())
        if self.on_hung is not None:
            self.on_hung(new)

    # --- the store -----------------------------------------------------------------------------

    def _publish(self, store: RoundStore | None, waits: list[PeerWait], now_ns: int, now_mono_ns: int) -> None:
        """Say this pod's long waits (or ``[]``) where the peers read them, when they changed; each
        with how long it had lasted when first published (kept: the text changes with the set only)."""
        if store is None or store.world_size < 2:
            return
        threshold = self.settings.after_s * PUBLISH_FRACTION
        lasted = {
            wait.identity(): (wait, self._published_s.get(wait.identity(), round(waited, 3)))
            for wait in waits
            if (waited := wait.waited_s(now_ns, now_mono_ns)) >= threshold
        }
        text = waits_text(sorted(
            (dataclasses.replace(wait, published_waited_s=figure) for wait, figure in lasted.values()),
            key=lambda wait: (wait.rank, wait.position.pg, wait.position.seq, wait.position.op),
        ))
        said = (self._attempt or 0, store.group_rank, store.world_size, text)
        if self._published != said:
            try:
                store.hang_waits.publish_wait(text)
            except STORE_ERRORS:
                # not said yet: a wait published later is timed from then
                self._published_s = {key: s for key, s in self._published_s.items() if key in lasted}
                return
            self._published = said
        self._published_s = {key: figure for key, (_, figure) in lasted.items()}

    def _peer_waits(self, store: RoundStore | None) -> list[PeerWait]:
        """Every other pod's published waits (what the store answers; nothing when it does not)."""
        if store is None or store.world_size < 2:
            return []
        try:
            values = store.hang_waits.waits_of(rank for rank in range(store.world_size) if rank != store.group_rank)
        except STORE_ERRORS as error:
            logger.debug("hang watch: reading the peers' waits failed: %s", error)
            return []
        # a wait's start is a peer's wall-clock time: out of that range (forged: -10**30) it would
        # make a wait of 10**21 s, a verdict whose report cannot even be written
        waits = [wait for value in values or () for wait in waits_from_text(value)
                 if as_time_ns(wait.position.entered_ns) is not None]
        return self._timed(waits, time.monotonic_ns())

    def _timed(self, waits: list[PeerWait], now_mono_ns: int) -> list[PeerWait]:
        """``waits`` (just read) each with its start on this host's monotonic clock where its pod
        said how long it had lasted: that long before this pod first read it with that figure.
        Only the waits read now are remembered (a pod publishes at most ``MAX_WAITS``)."""
        seen, timed = {}, []
        for wait in waits:
            if wait.published_waited_s is None:
                timed.append(wait)  # an older publisher: its wall-clock start (skew unbounded)
                continue
            key = wait.identity()
            known = self._peer_seen.get(key)
            if known is None or known[0] != wait.published_waited_s:
                known = (wait.published_waited_s, now_mono_ns)
            seen[key] = known
            timed.append(dataclasses.replace(wait, since_mono_ns=known[1] - int(known[0] * 1e9)))
        self._peer_seen = seen
        return timed


@contextlib.contextmanager
def hang_watch_running(watch: HangWatch | None) -> Iterator[None]:
    """``watch`` runs for the block (nothing when the watch is off)."""
    if watch is None:
        yield
        return
    with watch:
        yield
