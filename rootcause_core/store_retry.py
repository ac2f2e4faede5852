"""Retrying a write to an object store: which errors are worth another try, how long to wait, when to stop.

A pod writes its error document at the moment its job fails, and so do all its peers. That is exactly
when a store throttles. A pod that gives up on the first such answer leaves Flyte nothing to read.
The store clients retry on their own, each with its own counts and clocks. So how long a failing pod
spends on its document would be nobody's decision. Here it is one: every write goes through
:func:`call_with_retries`, under one :class:`Deadline`. Only transient errors are retried. The module
is pure stdlib, so both front-ends share it. ``docs/messages.md`` has the details.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Seconds one failing pod spends on its error documents, all tries and waits included (read when a
#: :class:`Deadline` is made, so tests can shorten it). 60 s: long enough to outlast a store's
#: throttling burst (S3 answers ``SlowDown`` while it scales a prefix, GCS throttles per object and
#: bucket for seconds; gcsfs's own retry budget is 60 s too), short enough that a job whose store is
#: down ends within a minute with the write failure in the pod log instead of hanging on.
DEADLINE_S = 60.0
#: The first wait between tries; each later one doubles, up to :data:`MAX_BACKOFF_S`.
FIRST_BACKOFF_S = 0.2
#: The longest wait between two tries: under the deadline, a pod tries at least every 5 s.
MAX_BACKOFF_S = 5.0

#: Seconds kept free between a writer's deadline and a hard time limit around it (the failure sink's):
#: the last request is cancelled, the failure logged and the process flushed before the limit hits.
LIMIT_MARGIN_S = 5.0

#: HTTP statuses that mean "not now" rather than "no": request timeout, throttling, server errors.
TRANSIENT_HTTP_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: S3's error codes for the same (``Error.Code`` of botocore's ``ClientError``, which s3fs keeps as
#: the ``__cause__`` of the ``OSError`` it raises), and S3's 409 for a conditional write racing
#: another one on the same key: retried, the next try then finds the winner's object.
TRANSIENT_S3_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "ConditionalRequestConflict",
    }
)
#: Library exceptions that mean the connection failed (refused, reset, closed early, timed out),
#: known by class name so none of those libraries is imported: requests' and botocore's
#: ``ConnectionError`` (gcsfs raises requests' ``ProxyError`` for a 502), requests' ``Timeout``,
#: botocore's ``HTTPClientError`` (connection closed, read timeout), aiohttp's connection errors.
TRANSIENT_CLASS_NAMES = frozenset(
    {
        "ConnectionError",
        "Timeout",
        "HTTPClientError",
        "ClientConnectionError",
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ChunkedEncodingError",
        "IncompleteRead",
    }
)
#: Answers that will not change by asking again (the object exists: another pod created it first).
FINAL_ERROR_TYPES: tuple[type[BaseException], ...] = (
    FileExistsError,
    FileNotFoundError,
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
)
#: A status in an error's text, for clients that give only text (obstore: "Server returned non-2xx
#: status code: 503 Service Unavailable").
_STATUS_IN_TEXT = re.compile(r"\bstatus(?: code)?:? (\d{3})\b", re.IGNORECASE)
#: How far down ``__cause__`` / ``__context__`` an error is looked into.
_MAX_CHAIN = 8


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what caused it (s3fs's ``OSError`` wraps botocore's ``ClientError``)."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(link))
        yield link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)


def _s3_answer(error: BaseException) -> tuple[str | None, int | None] | None:
    """``(Error.Code, HTTP status)`` of a botocore-style error, ``None`` for any other error."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict) or not ("Error" in response or "ResponseMetadata" in response):
        return None
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return (code if isinstance(code, str) else None), (status if isinstance(status, int) else None)


def _http_status(error: BaseException) -> int | None:
    """An HTTP status the error carries: aiohttp's ``status``, gcsfs's ``HttpError.code``."""
    for name in ("status", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def store_answer(error: BaseException) -> str | None:
    """What the store answered, when the error carries it: ``HTTP 503 SlowDown``, ``HTTP 429``.

    For the log: s3fs's message is S3's text alone ("Please reduce your request rate."), and which
    answer that was is what tells a reader whether to look at the store's load or its permissions.
    """
    for link in _chain(error):
        answer = _s3_answer(link)
        if answer is not None:
            code, status = answer
            parts = ([f"HTTP {status}"] if status else []) + ([code] if code else [])
            return " ".join(parts) or None
        status = _http_status(link)
        if status is not None:
            return f"HTTP {status}"
    return None


def is_write_conflict(error: BaseException) -> bool:
    """S3's answer to a conditional write racing another one on the same key (409).

    AWS S3 may answer ``409 ConditionalRequestConflict`` instead of ``412`` while a concurrent
    conditional write is in flight; the request is to be retried, and then finds the winner's
    object (``FileExistsError``). s3fs turns it into a plain ``OSError`` whose cause is botocore's error.
    """
    for link in _chain(error):
        answer = _s3_answer(link)
        if answer is not None:
            code, status = answer
            return code == "ConditionalRequestConflict" or (code is None and status == 409)
    return False


def is_transient_store_error(error: BaseException) -> bool:
    """True when another try of the same write may succeed.

    The first decisive shape along the error's cause chain wins: the store's own answer (S3 code and
    status, or an HTTP status) decides over the exception type a client translated it to (s3fs
    raises ``TimeoutError`` for ``RequestTimeout``, but ``FileNotFoundError`` for a missing bucket).
    """
    for link in _chain(error):
        answer = _s3_answer(link)
        if answer is not None:
            code, status = answer
            return code in TRANSIENT_S3_CODES or status in TRANSIENT_HTTP_STATUSES or is_write_conflict(link)
        status = _http_status(link)
        if status is not None:
            return status in TRANSIENT_HTTP_STATUSES
    for link in _chain(error):
        if isinstance(link, FINAL_ERROR_TYPES):
            return False
        if isinstance(link, (ConnectionError, TimeoutError)):
            return True
        if any(kind.__name__ in TRANSIENT_CLASS_NAMES for kind in type(link).__mro__):
            return True
        match = _STATUS_IN_TEXT.search(str(link))
        if match is not None:
            return int(match.group(1)) in TRANSIENT_HTTP_STATUSES
    return False


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: the ``n``-th wait is drawn from ``[b/2, b]``,
    ``b = min(max_s, first_s * 2**(n-1))``.

    Why jitter: pods that failed together would otherwise retry together and meet the store's
    throttling again in lockstep; why only half of it: the waits still grow, so a pod backs off.
    """

    first_s: float = FIRST_BACKOFF_S
    max_s: float = MAX_BACKOFF_S

    def ceiling_s(self, retry: int) -> float:
        """The longest wait before retry ``retry`` (1 for the wait after the first try)."""
        return min(self.max_s, self.first_s * 2 ** min(retry - 1, 64))

    def wait_s(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        ceiling = self.ceiling_s(retry)
        return ceiling / 2 + draw() * ceiling / 2


class Deadline:
    """A point in (monotonic) time after which no new try starts; shared by the writes of one pod."""

    def __init__(self, seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = DEADLINE_S if seconds is None else seconds
        self._clock = clock
        self.started = clock()

    def now(self) -> float:
        return self._clock()

    def remaining_s(self) -> float:
        return self.started + self.seconds - self._clock()


def deadline_inside(limit_s: float) -> float:
    """A deadline for writes that run under a hard time limit of ``limit_s`` (the agent watchdog's
    failure sink, which abandons its writer after 30 s): :data:`DEADLINE_S`, or less so that it ends
    :data:`LIMIT_MARGIN_S` before the limit and the writer reports its failure itself."""
    return max(0.0, min(DEADLINE_S, limit_s - LIMIT_MARGIN_S))


class GaveUp(Exception):
    """A store call that failed for good: its last error, how many tries and how long they took.

    ``transient`` says why it stopped: True, the deadline ran out while the store kept answering
    "not now"; False, the store's answer was final (nothing would change by asking again).
    """

    def __init__(self, error: BaseException, tries: int, elapsed_s: float, transient: bool, deadline_s: float) -> None:
        self.error = error
        self.tries = tries
        self.elapsed_s = elapsed_s
        self.transient = transient
        self.deadline_s = deadline_s
        super().__init__(f"{type(error).__name__}: {error} ({self.summary()})")

    def summary(self) -> str:
        """How it ended, one clause: ``3 tries in 1.4 s, no time left for another try before the 60 s deadline``."""
        tries = "1 try" if self.tries == 1 else f"{self.tries} tries"
        if self.tries == 0:
            why = "not tried: the deadline passed before its turn"
        elif self.transient:
            why = f"no time left for another try before the {self.deadline_s:g} s deadline"
        else:
            why = "not retried: the store's answer is final"
        return f"{tries} in {self.elapsed_s:.1f} s, {why}"


def call_with_retries(
    attempt: Callable[[float], T],
    deadline: Deadline,
    *,
    is_transient: Callable[[BaseException], bool] = is_transient_store_error,
    backoff: Backoff | None = None,
    sleep: Callable[[float], None] = time.sleep,
    draw: Callable[[], float] = random.random,
) -> T:
    """``attempt(seconds_left)`` until it returns, its error is final, or ``deadline`` passes.

    ``attempt`` gets the seconds left before the deadline so that it can bound its own request (a
    store that accepts the connection and never answers must not outlast the deadline). No wait
    ends past the deadline: when the next wait would, the call gives up right away. A call whose
    turn comes after the deadline is not tried at all. Raises :class:`GaveUp` (from the last error).
    """
    waits = backoff or Backoff()
    started = deadline.now()
    if deadline.remaining_s() <= 0:
        raise GaveUp(TimeoutError("no time left"), 0, 0.0, True, deadline.seconds)
    tries = 0
    while True:
        tries += 1
        try:
            return attempt(deadline.remaining_s())
        except Exception as error:
            transient = is_transient(error)
            wait = waits.wait_s(tries, draw)
            if not transient or deadline.remaining_s() <= wait:
                raise GaveUp(error, tries, deadline.now() - started, transient, deadline.seconds) from error
        sleep(wait)
