"""Every store operation of ours with a deadline: a store whose host froze must not freeze us too.

Why: a frozen node closes no socket. A torch ``TCPStore`` client that asks a frozen store waits for
its reply for ever; the client's ``timeout`` bounds only waits for keys. So every operation of ours
goes through :class:`BoundedStore`. It runs the operation on one helper thread, and the caller waits
at most ``timeout_s``. A late answer is not lost: once a slow host replies, the store is usable
again. A long pause of a living host then costs a late heartbeat, not a false verdict. How, with
the measurement and the thread's failure modes: ``docs/frozen_pods.md``.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any

from rootcause_engine.thread_guard import GuardedLoop, LoopGuard, describe_error


class StoreUnresponsive(TimeoutError):
    """The store did not answer within the deadline (or is still busy with an operation that did not)."""


#: What a store call raises when the store cannot be reached or answer (torch's ``DistError`` family
#: is ``RuntimeError``; :class:`StoreUnresponsive` is a ``TimeoutError``, an ``OSError``): the one
#: definition every store user catches.
STORE_ERRORS: tuple[type[Exception], ...] = (RuntimeError, OSError, ValueError)


#: What a death of the helper thread cost (the note's last words).
_STOPPED = ("the calls waiting on it failed as if the store had not answered, and a new thread served the next "
            "ones")


@dataclasses.dataclass
class _Request:
    operation: str
    args: tuple[Any, ...]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class BoundedStore:
    """A torch ``Store`` whose operations each return, raise, or give up within ``timeout_s``."""

    def __init__(self, store: Any, timeout_s: float, *, name: str = "rendezvous store") -> None:
        self.store = store
        self.timeout_s = timeout_s
        self.name = name
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        #: the request in flight and whether the helper thread serves: set by callers, and by a death
        self._lock = threading.Lock()
        self._busy: _Request | None = None  # the operation the helper thread is stuck in, if any
        self._busy_since: float | None = None
        self._loop = GuardedLoop("rootcause-store-client", self._serve_one, interval_s=0.0, first_wait=False,
                                 guard=LoopGuard(f"{name} client", stopped=_STOPPED), on_death=self._died)
        self._serving = False  # the helper thread was started and has not died
        self._closed = False

    def call(self, operation: str, *args: Any) -> Any:
        """``store.<operation>(*args)``, within ``timeout_s``; raises :class:`StoreUnresponsive` if not.

        An operation still in flight within its own deadline is waited for first: its caller may
        have stopped waiting early (a SIGTERM's exception raised in its wait, as when the kubelet
        stops the pod in the middle of a soft-restart check) or be another thread. Only one past
        its deadline makes the store unresponsive, and then every call fails at once.
        """
        while True:
            with self._lock:
                if self._closed:
                    raise StoreUnresponsive(f"the {self.name} client is closed")
                if not self._serving:  # the first call, or the thread died (:meth:`_died`)
                    self._serving = True
                    self._loop.start()
                in_flight, since = self._busy, self._busy_since
                if in_flight is None or in_flight.done.is_set():
                    request = _Request(operation, args)
                    self._busy, self._busy_since = request, time.monotonic()
                    break
                waited = time.monotonic() - (since or time.monotonic())
                if waited >= self.timeout_s:
                    raise StoreUnresponsive(
                        f"the {self.name} has not answered a {in_flight.operation} for {waited:.1f} s"
                    )
            in_flight.done.wait(self.timeout_s - waited)  # outside the lock: the others may look meanwhile
        self._requests.put(request)
        if not request.done.wait(self.timeout_s):
            raise StoreUnresponsive(f"the {self.name} did not answer a {operation} within {self.timeout_s:g} s")
        if request.error is not None:
            raise request.error
        return request.result

    @property
    def unresponsive_for_s(self) -> float:
        """How long the operation in flight has gone unanswered (0 when none is stuck)."""
        with self._lock:
            if self._busy is None or self._busy.done.is_set() or self._busy_since is None:
                return 0.0
            return time.monotonic() - self._busy_since

    def close(self) -> None:
        """Stop the helper thread once it is free (a stuck one stays blocked: it is a daemon)."""
        with self._lock:
            self._closed = True
        self._requests.put(None)

    def note(self) -> str | None:
        """For the report: a step of the helper thread failed, or the thread died (its callers were
        failed either way); ``None`` when neither."""
        return self._loop.note()

    def _serve_one(self) -> float:
        """One request (the helper thread's step); ``close``'s ``None`` ends the thread."""
        request = self._requests.get()
        if request is None:
            self._loop.stop(0)
            return 0.0
        try:
            self._answer(request)
        except Exception as error:  # outside the operation: that call fails now, the loop's guard logs it
            self._fail([request], f"the {self.name} client failed ({describe_error(error)})")
            raise
        return 0.0

    def _answer(self, request: _Request) -> None:
        if request.done.is_set():
            return  # failed by :meth:`_died` before it was queued: its caller was told it did not happen
        try:
            request.result = getattr(self.store, request.operation)(*request.args)
        except BaseException as error:  # handed to the caller, who decides
            request.error = error
        finally:
            request.done.set()

    def _died(self, error: BaseException) -> None:
        """The helper thread died (:func:`rootcause_engine.thread_guard.run_guarded` logged it): its callers, the one in
        flight and any queued, get :class:`StoreUnresponsive` now, not at their deadline; the next call
        starts a new thread. All under the lock, so that no call starts its thread before the queue is
        emptied of the requests failed here."""
        what = describe_error(error)
        with self._lock:
            waiting = [self._busy]
            while True:
                try:
                    waiting.append(self._requests.get_nowait())
                except queue.Empty:
                    break
            self._fail(waiting, f"the {self.name} client's thread died ({what})")
            self._serving = False

    @staticmethod
    def _fail(requests: list[_Request | None], why: str) -> None:
        """Answer ``requests`` not answered yet with :class:`StoreUnresponsive` (``why``)."""
        for request in requests:
            if request is not None and not request.done.is_set():
                request.error = StoreUnresponsive(why)
                request.done.set()
