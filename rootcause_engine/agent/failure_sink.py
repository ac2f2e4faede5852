"""The last-resort failure writer: how a process that must exit *now* still reports its root cause.

Why: the agent watchdog (:mod:`rootcause_engine.agent.watchdog`) ends a hung agent with
``os._exit``. No exception unwinds to the entrypoint, so its normal error path never runs. So the
entrypoint registers a *sink* here before it runs the task, and the watchdog hands its error to
:func:`deliver_last_resort` right before exiting. The report always goes to stderr too. The sink
runs under a time limit, so a hung object store cannot turn a hung agent into a hung pod. How:
``docs/teardown_watchdog.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import TextIO

from rootcause_engine.thread_guard import run_soon, wait_for

#: Writes the error document for one exception (the entrypoint's per-worker error-file writer).
FailureWriter = Callable[[BaseException], None]

#: Seconds a sink gets to write before the process exits anyway.
DEFAULT_SINK_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class FailureSink:
    """A registered last-resort writer and where it writes (for the log line that names it)."""

    write: FailureWriter
    destination: str


#: The registered sink: one reference, set by the entrypoint and read by the watchdog (no lock needed).
_sink: FailureSink | None = None


def register_failure_sink(write: FailureWriter, *, destination: str) -> None:
    """Make ``write`` the process's last-resort failure writer (replaces any earlier one)."""
    global _sink
    _sink = FailureSink(write, destination)


def unregister_failure_sink() -> None:
    """Forget the registered writer (the entrypoint calls this when the task is done)."""
    global _sink
    _sink = None


def registered_failure_sink() -> FailureSink | None:
    return _sink


@contextlib.contextmanager
def failure_sink(write: FailureWriter, *, destination: str) -> Iterator[FailureSink]:
    """Register ``write`` for the duration of the block (what the entrypoint wraps the task in)."""
    register_failure_sink(write, destination=destination)
    try:
        sink = registered_failure_sink()
        assert sink is not None
        yield sink
    finally:
        unregister_failure_sink()


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What :func:`deliver_last_resort` managed to do."""

    written_to: str | None  # the sink's destination, when the sink finished without error
    problem: str | None  # why the sink did not write (none registered, raised, timed out)


def _report_of(error: BaseException) -> str:
    report = getattr(error, "report", None)
    return report if isinstance(report, str) and report else f"{type(error).__name__}: {error}"


def deliver_last_resort(
    error: BaseException, *, timeout_s: float = DEFAULT_SINK_TIMEOUT_S, stream: TextIO | None = None
) -> Delivery:
    """Print ``error``'s report on stderr, then give it to the registered sink within ``timeout_s``.

    Never raises: the caller is about to ``os._exit`` and has no one left to report to.
    """
    out = stream if stream is not None else sys.stderr
    with contextlib.suppress(Exception):
        out.write(_report_of(error) + "\n")
        out.flush()
    sink = registered_failure_sink()
    if sink is None:
        return Delivery(None, "no failure sink registered (local run): the report went to stderr only")
    written = run_soon(lambda: sink.write(error), name="failure sink")
    if not wait_for(written, timeout_s):
        problem = f"the failure sink for {sink.destination} did not finish within {timeout_s:g} s"
    elif (failure := written.exception()) is not None:
        problem = f"the failure sink for {sink.destination} failed: " + "".join(
            traceback.format_exception_only(failure)
        ).strip()
    else:
        return Delivery(sink.destination, None)
    with contextlib.suppress(Exception):
        out.write(problem + "\n")
        out.flush()
    return Delivery(None, problem)
