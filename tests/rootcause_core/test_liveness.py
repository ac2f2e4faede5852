"""The liveness settings: a silence limit spans at least four heartbeats, and the task config says why not."""

from __future__ import annotations

import pytest

from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S, liveness_problem


def test_the_defaults_work_and_a_limit_must_span_four_beats() -> None:
    assert liveness_problem(HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S) is None
    assert liveness_problem(2.0, None) is None  # no liveness watch: any interval
    assert liveness_problem(1.0, 4.0) is None
    assert "at least 4 heartbeats (4 s with heartbeat_interval_s=1)" in liveness_problem(1.0, 3.0)
    assert "heartbeat_interval_s must be > 0" in liveness_problem(0, 5.0)
    assert liveness_problem(0.5, True) is not None  # a flag is no duration


@pytest.mark.parametrize(("fields", "fragment"), [
    ({"lost_after_s": 1.0}, "lost_after_s must be at least 4 heartbeats"),
    ({"heartbeat_interval_s": 2.0}, "(8 s with heartbeat_interval_s=2)"),
    ({"heartbeat_interval_s": -1.0}, "heartbeat_interval_s must be > 0"),
])
def test_the_task_config_refuses_settings_that_cannot_work(fields: dict[str, float], fragment: str) -> None:
    from flytekitplugins_rootcause.config import ElasticRootCause

    with pytest.raises(ValueError, match="heartbeat") as raised:
        ElasticRootCause(nnodes=2, nproc_per_node=1, **fields)
    assert fragment in str(raised.value)
    assert ElasticRootCause(nnodes=2, nproc_per_node=1, heartbeat_interval_s=1.0, lost_after_s=10.0)
