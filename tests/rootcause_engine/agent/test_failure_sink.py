"""The last-resort failure writer (``rootcause_engine/agent/failure_sink.py``): one registered sink at a time,
the report text it is given, a stream that fails, and a real process that writes its document then ``os._exit``s."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_engine.agent import failure_sink
from rootcause_engine.agent.failure_sink import (
    Delivery,
    FailureSink,
    deliver_last_resort,
    register_failure_sink,
    registered_failure_sink,
    unregister_failure_sink,
)


@pytest.fixture(autouse=True)
def _no_sink_left() -> Iterator[None]:
    yield
    unregister_failure_sink()


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("stderr is closed")


class _WithReport(Exception):
    def __init__(self, report: object) -> None:
        super().__init__("plain text")
        self.report = report


def test_a_new_registration_replaces_the_old_one_and_unregistering_forgets_it() -> None:
    first: list[BaseException] = []
    second: list[BaseException] = []
    register_failure_sink(first.append, destination="gs://a/error.pb")
    register_failure_sink(second.append, destination="s3://b/error.pb")
    assert registered_failure_sink() == FailureSink(second.append, "s3://b/error.pb")
    error = RuntimeError("hung")
    assert deliver_last_resort(error, stream=io.StringIO()) == Delivery("s3://b/error.pb", None)
    assert (first, second) == ([], [error])
    unregister_failure_sink()
    assert registered_failure_sink() is None


def test_the_block_s_sink_is_forgotten_even_when_the_block_raises() -> None:
    with pytest.raises(ValueError, match="task failed"), failure_sink.failure_sink(
        lambda _: None, destination="file:///tmp/out"
    ) as sink:
        assert registered_failure_sink() is sink and sink.destination == "file:///tmp/out"
        raise ValueError("task failed")
    assert registered_failure_sink() is None


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (_WithReport("[root cause] rank 3 (local rank 1) failed: ValueError"),
         "[root cause] rank 3 (local rank 1) failed: ValueError"),
        (_WithReport(""), "_WithReport: plain text"),  # an empty report says nothing: the exception does
        (_WithReport(["not", "text"]), "_WithReport: plain text"),
        (TimeoutError("agent hung for 60 s"), "TimeoutError: agent hung for 60 s"),
    ],
)
def test_stderr_gets_the_error_s_report_or_else_its_type_and_message(error: BaseException, line: str) -> None:
    stream = io.StringIO()
    delivery = deliver_last_resort(error, stream=stream)
    assert stream.getvalue() == line + "\n"
    assert delivery == Delivery(None, "no failure sink registered (local run): the report went to stderr only")


def test_a_broken_stream_does_not_keep_the_sink_from_writing() -> None:
    written: list[BaseException] = []
    error = RuntimeError("hung")
    with failure_sink.failure_sink(written.append, destination="gs://b/o"):
        assert deliver_last_resort(error, stream=_Broken()) == Delivery("gs://b/o", None)
    assert written == [error]
    assert deliver_last_resort(error, stream=_Broken()).problem is not None  # no sink: said, and no raise


def test_a_sink_that_succeeds_adds_nothing_to_the_stream_after_the_report() -> None:
    stream = io.StringIO()
    with failure_sink.failure_sink(lambda _: None, destination="gs://b/o"):
        deliver_last_resort(_WithReport("[victim] rank 0"), stream=stream)
    assert stream.getvalue() == "[victim] rank 0\n"


def test_a_sink_that_raises_a_base_exception_is_reported_by_its_type() -> None:
    def exits(_: BaseException) -> None:
        raise KeyboardInterrupt

    stream = io.StringIO()
    with failure_sink.failure_sink(exits, destination="gs://b/o"):
        delivery = deliver_last_resort(RuntimeError("hung"), stream=stream)
    assert delivery == Delivery(None, "the failure sink for gs://b/o failed: KeyboardInterrupt")
    assert stream.getvalue().endswith("the failure sink for gs://b/o failed: KeyboardInterrupt\n")


AGENT = """
import os, sys
from rootcause_engine.agent.failure_sink import failure_sink, deliver_last_resort

class Hung(Exception):
    report = "[root cause] the agent watchdog found the agent hung"

def write(error):
    with open(sys.argv[1], "w") as document:
        document.write(error.report)

with failure_sink(write, destination=sys.argv[1]):
    delivery = deliver_last_resort(Hung())
    print(delivery.written_to, flush=True)
    os._exit(3)
"""


def test_a_process_that_exits_at_once_still_leaves_its_document(tmp_path: Path) -> None:
    document = tmp_path / "error.txt"
    done = subprocess.run([sys.executable, "-c", AGENT, str(document)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 3
    assert done.stderr == "[root cause] the agent watchdog found the agent hung\n"
    assert done.stdout == f"{document}\n"
    assert document.read_text() == "[root cause] the agent watchdog found the agent hung"
