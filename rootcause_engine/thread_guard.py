"""A long-lived thread (of the agent, or of a worker) never dies in silence.

Why: a thread that dies of an exception nobody expected stops what it did without a word. The peer
watch's heartbeat stops, and the pod's peers then declare a healthy pod lost: the job ends, and the
report names the wrong pod. So every long-lived loop is run in two layers:

- each iteration through a :class:`LoopGuard`: an unexpected exception costs that iteration only.
  Its traceback is logged the first time each kind of error is seen (a loop that beats twenty
  times a second must not flood the log), and the first one is kept for the pod's report
  (:meth:`LoopGuard.note`). The loop goes on;
- the thread's target through :func:`run_guarded` (:func:`start_guarded` starts such a thread,
  :func:`guarded_thread` makes one to start later): a death the loop did not survive is logged at
  critical level with its traceback and handed to ``on_death``. The owner then turns it into a
  failure of this pod that its peers and its report read (:meth:`LoopGuard.died` keeps it for the
  note), instead of a silence.

Here, not in ``rootcause_engine.agent``: the workers' threads (the progress beacon, the soft-restart
world watcher) use it too, and a worker imports nothing of the agent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rootcause_core.safe_text import safe_str
from rootcause_core.timestamps import rfc3339_ns

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Kinds of error whose traceback one guard logs at error level (later kinds are logged at debug).
_KINDS_LOGGED = 16


class LoopGuard:
    """The iterations of one long-lived loop (``name`` in the log): see the module docstring.

    ``stopped``: what this pod loses once the loop's thread died (the note's last words)."""

    def __init__(self, name: str, *, stopped: str = "") -> None:
        self.name = name
        self.stopped = stopped
        self.failures = 0
        #: the first unexpected error: when (wall clock, ns), and what (``TypeError: ...``)
        self.first: tuple[int, str] | None = None
        #: the death of the loop's thread (:meth:`died`): when, and of what
        self.death: tuple[int, str] | None = None
        self._kinds: set[str] = set()
        self._lock = threading.Lock()

    def run(self, step: Callable[[], T]) -> T | None:
        """``step()``; ``None`` when it raised (logged and kept, never raised)."""
        try:
            return step()
        except Exception as error:  # the loop must outlive any one iteration
            self._failed(error)
            return None

    def _failed(self, error: Exception) -> None:
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        with self._lock:
            self.failures += 1
            if self.first is None:
                self.first = (time.time_ns(), _describe(error))
            new_kind = kind not in self._kinds and len(self._kinds) < _KINDS_LOGGED
            if new_kind:
                self._kinds.add(kind)
        if new_kind:
            logger.error("%s: one of its iterations failed, the loop goes on (this kind of error is logged once)",
                         self.name, exc_info=error)
        else:
            logger.debug("%s: an iteration failed again: %s", self.name, _describe(error))

    def died(self, error: BaseException) -> None:
        """The loop's thread died of ``error`` (an ``on_death`` for :func:`run_guarded`, which logged
        it): kept for :meth:`note`. The first death is kept (a restarted thread may die again)."""
        with self._lock:
            if self.death is None:
                self.death = (time.time_ns(), _describe(error))

    def note(self) -> str | None:
        """For the report: this loop's first unexpected error and how many there were, and the death
        of its thread (:meth:`died`); ``None``: neither."""
        with self._lock:
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


def start_guarded(loop: Callable[[], None], *, name: str,
                  on_death: Callable[[BaseException], None]) -> threading.Thread:
    """Start a daemon thread named ``name`` that runs ``loop`` through :func:`run_guarded`."""
    thread = guarded_thread(loop, name=name, on_death=on_death)
    thread.start()
    return thread


def describe_error(error: BaseException) -> str:
    """``TypeError: message``, the message cut short (an error may quote a hostile value), never
    raising (an error whose ``__str__`` raises must not kill the loop that caught it)."""
    text = safe_str(error)
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


_describe = describe_error
