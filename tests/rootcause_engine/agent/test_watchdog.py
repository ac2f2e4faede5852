"""The watchdog's hang rule (pure) and the last-resort failure sink."""

from __future__ import annotations

import io
import threading

import pytest

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_engine.agent import failure_sink
from rootcause_engine.agent.watchdog import (
    AgentSnapshot,
    WatchdogSettings,
    hang_deadline_ns,
    is_hung,
    rendezvous_allowance_s,
    watchdog_settings,
)

S = 1_000_000_000
T0 = 1_700_000_000 * S
SETTINGS = WatchdogSettings(
    interval_s=1, hang_timeout_s=60, teardown_grace_s=5, rendezvous_allowance_s=930, exit_barrier_allowance_s=300
)


def snapshot(now_s: float, **fields: object) -> AgentSnapshot:
    values: dict[str, object] = {
        "workers": 4,
        "exited": 0,
        "first_failure_ns": None,
        "last_exit_ns": None,
        "rendezvous_since_ns": None,
    }
    values.update(fields)
    return AgentSnapshot(now_ns=T0 + int(now_s * S), **values)  # type: ignore[arg-type]


def test_healthy_workers_never_make_a_hang() -> None:
    assert hang_deadline_ns(snapshot(10_000), SETTINGS) is None
    assert not is_hung(snapshot(10_000, exited=3, last_exit_ns=T0), SETTINGS)


def test_no_workers_yet_is_not_watched() -> None:
    """The first rendezvous has torch's own timeouts and nothing to report."""
    assert hang_deadline_ns(snapshot(10_000, workers=0, rendezvous_since_ns=T0), SETTINGS) is None


def test_a_failure_not_finished_within_the_hang_timeout_is_a_hang() -> None:
    failed = {"exited": 1, "first_failure_ns": T0, "last_exit_ns": T0}
    assert not is_hung(snapshot(59.9, **failed), SETTINGS)
    assert is_hung(snapshot(60, **failed), SETTINGS)
    # zombies: every worker dead, agent silent
    assert is_hung(snapshot(61, exited=4, first_failure_ns=T0, last_exit_ns=T0 + S), SETTINGS)


def test_a_rendezvous_gets_its_own_time_limit_first() -> None:
    restarting = {"exited": 4, "first_failure_ns": T0, "last_exit_ns": T0, "rendezvous_since_ns": T0 + 10 * S}
    assert not is_hung(snapshot(100, **restarting), SETTINGS)
    assert not is_hung(snapshot(10 + 930 + 59, **restarting), SETTINGS)
    assert is_hung(snapshot(10 + 930 + 60, **restarting), SETTINGS)


def test_all_succeeded_waits_for_the_exit_barrier_first() -> None:
    in_barrier = {"exited": 4, "last_exit_ns": T0, "exit_barrier_since_ns": T0 + S}
    assert not is_hung(snapshot(1 + 300 + 59, **in_barrier), SETTINGS)
    assert is_hung(snapshot(1 + 300 + 60, **in_barrier), SETTINGS)


def test_every_worker_gone_outside_the_exit_barrier_is_a_hang_whatever_torch_believes() -> None:
    """The reported stall: all workers exited, torch's monitor loop still reads HEALTHY."""
    gone = {"exited": 4, "last_exit_ns": T0}
    assert not is_hung(snapshot(59, **gone), SETTINGS)
    assert is_hung(snapshot(60, **gone), SETTINGS)
    # after the barrier let it go, the agent has the hang timeout again to return
    left = {**gone, "exit_barrier_left_ns": T0 + 200 * S}
    assert not is_hung(snapshot(200 + 59, **left), SETTINGS)
    assert is_hung(snapshot(200 + 60, **left), SETTINGS)


def test_a_failure_outside_any_phase_is_timed_from_the_failure_not_the_last_exit() -> None:
    failed = {"exited": 2, "first_failure_ns": T0, "last_exit_ns": T0 + 30 * S}
    assert is_hung(snapshot(60, **failed), SETTINGS)


def test_rendezvous_allowance_reads_the_task_rdzv_configs() -> None:
    assert rendezvous_allowance_s({"timeout": 900, "join_timeout": 900}) == 930
    assert rendezvous_allowance_s({"join_timeout": "120", "last_call_timeout": 5}) == 125
    assert rendezvous_allowance_s(None) == 630
    assert rendezvous_allowance_s({"join_timeout": "soon"}) == 630


def test_settings_come_from_the_config_and_the_off_switch_works() -> None:
    settings = watchdog_settings(ElasticRootCause(agent_watchdog_interval_s=0.5, agent_hang_timeout_s=30))
    assert settings is not None
    assert (settings.interval_s, settings.hang_timeout_s, settings.rendezvous_allowance_s) == (0.5, 30, 930)
    assert watchdog_settings(ElasticRootCause(agent_watchdog=False)) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"agent_watchdog_interval_s": 0},
        {"agent_hang_timeout_s": 5, "teardown_grace_s": 5},
        {"nccl_heartbeat_timeout_s": 0},
        {"nccl_async_error_handling": 7},
        {"collective_timeout_s": -1},
    ],
)
def test_bad_settings_are_rejected_with_a_clear_error(fields: dict[str, object]) -> None:
    name = next(iter(fields))
    with pytest.raises(ValueError, match=name):
        ElasticRootCause(**fields)  # type: ignore[arg-type]


class Report(Exception):
    report = "[root cause] rank 3 failed"


def test_without_a_sink_the_report_goes_to_stderr() -> None:
    stream = io.StringIO()
    delivery = failure_sink.deliver_last_resort(Report(), stream=stream)
    assert delivery.written_to is None and "no failure sink registered" in (delivery.problem or "")
    assert stream.getvalue().startswith("[root cause] rank 3 failed\n")


def test_the_registered_sink_gets_the_error_and_is_forgotten_afterwards() -> None:
    written: list[BaseException] = []
    error = Report()
    with failure_sink.failure_sink(written.append, destination="s3://bucket/out"):
        delivery = failure_sink.deliver_last_resort(error, stream=io.StringIO())
    assert written == [error] and delivery == failure_sink.Delivery("s3://bucket/out", None)
    assert failure_sink.registered_failure_sink() is None


def test_a_failing_or_hanging_sink_is_reported_and_never_blocks_the_exit() -> None:
    def broken(_: BaseException) -> None:
        raise OSError("bucket unreachable")

    stream = io.StringIO()
    with failure_sink.failure_sink(broken, destination="gs://b/o"):
        delivery = failure_sink.deliver_last_resort(Report(), stream=stream)
    assert delivery.written_to is None and "OSError: bucket unreachable" in (delivery.problem or "")
    assert "failure sink for gs://b/o failed" in stream.getvalue()

    release = threading.Event()
    with failure_sink.failure_sink(lambda _: release.wait(), destination="gs://b/o"):
        delivery = failure_sink.deliver_last_resort(Report(), timeout_s=0.2, stream=io.StringIO())
    release.set()
    assert "did not finish within 0.2 s" in (delivery.problem or "")
