"""The watchdog's exit status: 0 once its document is written (the exit-0 contract), 4 without one.

The training operator fails a PyTorchJob as soon as one pod exits non-zero, and Flyte then reads no
error document at all: a watchdog that wrote the root cause and exited 4 would hide it.
"""

from __future__ import annotations

import pytest

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.diagnosis.pipeline import Trigger
from rootcause_engine.agent.failure_sink import failure_sink
from rootcause_engine.agent.launch_observer import LaunchObserver
from rootcause_engine.agent.watchdog import AGENT_HUNG_EXIT_CODE, AgentWatchdog, WatchdogSettings


def _fire(sink: str) -> tuple[int, list[BaseException]]:
    """Fire a watchdog over a launch with no attempt; ``sink``: ``writes``, ``fails`` or ``none``."""
    exits: list[int] = []
    written: list[BaseException] = []

    def write(error: BaseException) -> None:
        if sink == "fails":
            raise OSError("503 Slow Down, every try")
        written.append(error)

    settings = WatchdogSettings(interval_s=1.0, hang_timeout_s=60.0, teardown_grace_s=1.0, sink_timeout_s=5.0)
    with DeathWatcher() as watcher:
        observer = LaunchObserver(watcher, teardown_grace_s=1.0, probe_before_teardown=False)
        watchdog = AgentWatchdog(
            observer, settings, error_of=lambda d: RuntimeError(d.report), exit_process=exits.append
        )
        if sink == "none":
            watchdog.fire(None, (0.0, "the agent is stuck", Trigger.AGENT_HUNG))  # type: ignore[arg-type]
        else:
            with failure_sink(write, destination="memory://prefix"):
                watchdog.fire(None, (0.0, "the agent is stuck", Trigger.AGENT_HUNG))  # type: ignore[arg-type]
    [code] = exits
    return code, written


@pytest.mark.parametrize(
    ("sink", "code"), [("writes", 0), ("fails", AGENT_HUNG_EXIT_CODE), ("none", AGENT_HUNG_EXIT_CODE)]
)
def test_the_pod_exits_0_only_when_its_document_was_written(sink: str, code: int) -> None:
    exited, written = _fire(sink)
    assert exited == code
    assert bool(written) == (sink == "writes")
