"""A long-lived thread (of the agent, or of a worker) never dies in silence; callbacks run on one pool.
A thread that dies of an unexpected exception stops its work without a word. If it is the peer
watch's heartbeat, the peers declare a healthy pod lost, and the report names the wrong pod. So every
long-lived loop runs guarded. An error costs one iteration (:class:`LoopGuard`), and a thread's death
becomes a failure its pod reports (:func:`run_guarded`). Work that may block runs on one callback
pool (:func:`run_soon`), never on a thread of its own. It lives here, not in the agent, because a
worker's threads use it too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from rootcause_core.safe_text import safe_str
from rootcause_core.timestamps import rfc3339_ns

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Kinds of error whose traceback one guard logs at error level (later kinds are logged at debug).
_KINDS_LOGGED = 16

class LoopGuard:
    """The iterations of one long-lived loop (``name`` in the log): see the module docstring.

    ``stopped``: what this pod loses once the loop's thread died (the note's last words). No lock:
    a guard is written by one thread at a time (its loop's; or the pool's, for looks that never
    overlap) and read by the report, each field set whole by one statement, so a reader sees a
    field before or after a write, never half of one."""

    def __init__(self, name: str, *, stopped: str = "") -> None:
        self.name = name
        self.stopped = stopped
        self.failures = 0
        #: the first unexpected error: when (wall clock, ns), and what (``TypeError: ...``)
        self.first: tuple[int, str] | None = None
        #: the death of the loop's thread (:meth:`died`): when, and of what
        self.death: tuple[int, str] | None = None
        self._kinds: set[str] = set()

    def run(self, step: Callable[[], T]) -> T | None:
        """``step()``; ``None`` when it raised (logged and kept, never raised)."""
        try:
            return step()
        except Exception as error:  # the loop must outlive any one iteration
            self._failed(error)
            return None

    def _failed(self, error: Exception) -> None:
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        self.failures += 1
        if self.first is None:
            self.first = (time.time_ns(), _describe(error))
        if kind not in self._kinds and len(self._kinds) < _KINDS_LOGGED:
            self._kinds.add(kind)
            logger.error("%s: one of its iterations failed, the loop goes on (this kind of error is logged once)",
                         self.name, exc_info=error)
        else:
            logger.debug("%s: an iteration failed again: %s", self.name, _describe(error))

    def died(self, error: BaseException) -> None:
        """The loop's thread died of ``error`` (an ``on_death`` for :func:`run_guarded`, which logged
        it): kept for :meth:`note`. The first death is kept (a restarted thread may die again)."""
        if self.death is None:
            self.death = (time.time_ns(), _describe(error))

    def note(self) -> str | None:
        """For the report: this loop's first unexpected error and how many there were, and the death
        of its thread (:meth:`died`); ``None``: neither."""
        first, failures, death = self.first, self.failures, self.death
        notes = []
        if first is not None:
            when, what = first
            again = f" ({failures} iterations failed in all)" if failures > 1 else ""
            notes.append(f"This pod's {self.name} failed at {rfc3339_ns(when)}: {what}{again}; it went on.")
        if death is not None:
            when, what = death
            lost = f": {self.stopped}" if self.stopped else ""
            notes.append(f"This pod's {self.name} stopped at {rfc3339_ns(when)} ({what}){lost}.")
        return " ".join(notes) or None


def run_guarded(loop: Callable[[], None], *, name: str, on_death: Callable[[BaseException], None]) -> None:
    """Run ``loop`` (a thread's whole life); if it raises, log the traceback and call ``on_death``
    with the error (itself guarded): the owner reports the death instead of leaving a silence."""
    try:
        loop()
    except BaseException as error:  # whatever it died of, the death is said (a thread re-raises nothing)
        logger.critical("%s: its thread died", name, exc_info=error)
        try:
            on_death(error)
        except Exception:
            logger.exception("%s: reporting the death of its thread failed", name)


def guarded_thread(loop: Callable[[], None], *, name: str,
                   on_death: Callable[[BaseException], None]) -> threading.Thread:
    """A daemon thread named ``name`` (not started) that runs ``loop`` through :func:`run_guarded`."""
    return threading.Thread(target=run_guarded, args=(loop,), kwargs={"name": name, "on_death": on_death},
                            name=name, daemon=True)


#: What a step returns: the seconds until it is due again (``None``: its duty's ``every_s``).
Step = Callable[[], "float | None"]


@dataclasses.dataclass(eq=False)
class Duty:
    """One periodic job of a :class:`GuardedLoop`: ``step`` every ``every_s``, its failures kept by
    ``guard``. ``on_death``: told when the loop's thread died (after ``guard``); ``outlives_death``:
    whether a thread started again after a death takes the duty on again."""

    step: Step
    every_s: float
    guard: LoopGuard
    on_death: Callable[[BaseException], None] | None = None
    outlives_death: bool = True
    #: when the step is due next (monotonic seconds; only the loop's thread reads it once added)
    due: float = 0.0


class GuardedLoop:
    """A long-lived daemon thread named ``name`` that runs its duties, each when due, until :meth:`stop`.

    ``step`` (optional) is the loop's own duty, every ``interval_s`` (first after one interval,
    unless not ``first_wait``), its failures kept by :attr:`guard` (named after the thread, or the
    ``guard`` given, which a loop started anew then shares). More duties join with :meth:`every` and
    leave with :meth:`drop`, from any thread: the changes pass through a queue, and only the loop's
    thread touches its list of duties. A step returns the seconds until it is due again (0: at once;
    it may block, as the death watcher's ``poll`` does, and holds the other duties meanwhile).

    A death of the thread anyway goes to every duty's guard and ``on_death``, then to the loop's
    ``on_death``; :meth:`start` after it starts a new thread with the duties that outlive a death.
    ``at_end``: run on the thread as it ends, whether stopped or dead (its resources released)."""

    def __init__(self, name: str, step: Step | None = None, *, interval_s: float = 1.0, stopped: str = "",
                 guard: LoopGuard | None = None, on_death: Callable[[BaseException], None] | None = None,
                 first_wait: bool = True, at_end: Callable[[], None] | None = None) -> None:
        self.name = name
        self.guard = guard or LoopGuard(name.removeprefix("rootcause-").replace("-", " "), stopped=stopped)
        self._on_death = on_death
        self._at_end = at_end
        self._changes: queue.SimpleQueue[tuple[bool, Duty]] = queue.SimpleQueue()  # (added, duty)
        self._duties: list[Duty] = []  # the loop's thread's own
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._run_all = threading.Event()  # set by wake(): every duty is due at the next turn
        self._thread: threading.Thread | None = None
        if step is not None:
            self.every(interval_s, step, guard=self.guard, first_wait=first_wait)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def every(self, every_s: float, step: Step, *, guard: LoopGuard, first_wait: bool = True,
              on_death: Callable[[BaseException], None] | None = None, outlives_death: bool = True) -> Duty:
        """Add a duty (see :class:`Duty`): its first step after ``every_s``, or at once."""
        duty = Duty(step, every_s, guard, on_death, outlives_death,
                    due=time.monotonic() + (every_s if first_wait else 0.0))
        self._changes.put((True, duty))
        self._woken.set()
        return duty

    def drop(self, duty: Duty) -> None:
        """Remove ``duty`` (a step of it under way ends first)."""
        self._changes.put((False, duty))
        self._woken.set()

    def start(self) -> GuardedLoop:
        """Start the thread (again, after a :meth:`stop` or a death): a new thread with its own stop signal,
        so that a previous thread still ending never runs on. Its owner starts it again only once the
        previous thread ended (:meth:`ensure_running`; a stop that joined it; a death, told on that thread
        after its last step)."""
        self._stopping = stopping = threading.Event()
        self._thread = guarded_thread(lambda: self._run(stopping), name=self.name, on_death=self._died)
        self._thread.start()
        return self

    def ensure_running(self) -> None:
        """Start the thread unless it runs (the first duty's owner, or after a death)."""
        if not self.running:
            self.start()

    def wake(self) -> None:
        """End the current wait: every duty runs now, due or not (a peer's link closed: the heartbeat's
        next look is now, not a pause later)."""
        self._run_all.set()
        self._woken.set()

    def stop(self, timeout_s: float | None = None) -> None:
        """End the loop after its current step; wait up to ``timeout_s`` for it (never from the loop's
        own thread, which just ends after the step)."""
        self._stopping.set()
        self._woken.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and timeout_s != 0:
            thread.join(timeout_s)

    def note(self) -> str | None:
        return self.guard.note()

    def _run(self, stopping: threading.Event) -> None:
        try:
            while not stopping.is_set():
                self._take_changes()
                if self._run_all.is_set():
                    self._run_all.clear()
                    for duty in self._duties:
                        duty.due = 0.0
                for duty in self._duties:
                    if duty.due <= time.monotonic():
                        wait_s = duty.guard.run(duty.step)
                        duty.due = time.monotonic() + (wait_s if wait_s is not None else duty.every_s)
                    if stopping.is_set():
                        return
                next_due = min((duty.due for duty in self._duties), default=None)
                wait_s = None if next_due is None else next_due - time.monotonic()
                if wait_s is None or wait_s > 0:
                    self._woken.wait(wait_s)
                    self._woken.clear()
        finally:
            if self._at_end is not None:
                self._at_end()

    def _take_changes(self) -> None:
        while True:
            try:
                added, duty = self._changes.get_nowait()
            except queue.Empty:
                return
            if added:
                self._duties.append(duty)
            elif duty in self._duties:
                self._duties.remove(duty)

    def _died(self, error: BaseException) -> None:
        self._take_changes()  # the thread is gone: its list is this (dying) thread's to hand over
        for duty in self._duties:
            if duty.guard is not self.guard:
                duty.guard.died(error)
            if duty.on_death is not None:
                duty.on_death(error)
        self._duties = [duty for duty in self._duties if duty.outlives_death]
        self.guard.died(error)
        if self._on_death is not None:
            self._on_death(error)


class _CallbackPool:
    """Daemon threads that run callbacks: an idle one takes the next, and a callback that finds none idle
    starts one. So no callback waits behind others that block (a teardown, a settling, a store write):
    the watchdog's last-resort write and the isolation gate's probes start at once whatever else runs.
    How many run at once is bounded by their sources (one per failure, per lost verdict, per witness
    probed, one hang look), and threads are reused, not ended.

    Not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at interpreter exit, so a
    callback stuck in a store call would hang the pod's exit; and a forked child inherits its count of
    idle threads that do not exist there. Here a child starts a pool of its own (:func:`run_soon`).
    The lock keeps the count of idle threads true: each will take one callback."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], str, concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue())
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, callback: Callable[[], T], name: str) -> concurrent.futures.Future[T]:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.put((callback, name, done))
            if self._idle:
                self._idle -= 1
            else:
                threading.Thread(target=self._serve, name="rootcause-callback", daemon=True).start()
        return done

    def _serve(self) -> None:
        """Counted idle before the future is done: whoever waited on it and submits the next callback
        finds this thread free."""
        while True:
            callback, name, done = self._queue.get()
            if not done.set_running_or_notify_cancel():
                self._became_idle()
                continue
            try:
                result = callback()
            except BaseException as error:  # a callback's failure is its own: logged, kept on its future
                logger.error("%s: the callback failed", name, exc_info=error)
                self._became_idle()
                done.set_exception(error)
            else:
                self._became_idle()
                done.set_result(result)

    def _became_idle(self) -> None:
        with self._lock:
            self._idle += 1


_pool = _CallbackPool()


def run_soon(callback: Callable[[], T], *, name: str) -> concurrent.futures.Future[T]:
    """Run ``callback`` now on the process's callback threads (a callback that blocks holds one thread,
    never its caller nor another callback); its future holds what it returned or raised (logged with
    ``name``)."""
    global _pool
    if _pool.pid != os.getpid():  # a forked child: the parent's threads are not here
        _pool = _CallbackPool()
    return _pool.submit(callback, name)


def wait_for(future: concurrent.futures.Future[Any] | None, timeout_s: float | None) -> bool:
    """Whether ``future`` (``None``: none) is done within ``timeout_s``; never raises what it raised."""
    if future is None:
        return True
    return not concurrent.futures.wait([future], timeout=timeout_s).not_done


_worker_watch: GuardedLoop | None = None
_worker_watch_pid: int | None = None


def worker_watch() -> GuardedLoop:
    """This worker process's one watch thread, started by its first duty's owner (``ensure_running``):
    the progress beacon's beats (:mod:`rootcause_engine.worker.progress_beacon`) and, from the first
    soft-restart group on, the world watcher's looks (:mod:`rootcause_engine.soft_restart`). One thread
    for both: each is a file read or write every few moments. A forked child (a data loader's worker)
    gets a loop of its own, not started."""
    global _worker_watch, _worker_watch_pid
    if _worker_watch is None or _worker_watch_pid != os.getpid():
        _worker_watch = GuardedLoop("rootcause-worker-watch")
        _worker_watch_pid = os.getpid()
    return _worker_watch


def describe_error(error: BaseException) -> str:
    """``TypeError: message``, the message cut short (an error may quote a hostile value), never
    raising (an error whose ``__str__`` raises must not kill the loop that caught it)."""
    text = safe_str(error)
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


_describe = describe_error
