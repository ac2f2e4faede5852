"""The root-cause settings both front-ends share (``rootcause_engine/settings.py``): their defaults, the
wait derived from them, and every check that refuses a value no launch could use, with the message it gives."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rootcause_engine import settings
from rootcause_engine.settings import (
    DEFAULT_AGREEMENT_TIMEOUT_S,
    DEFAULT_TEARDOWN_GRACE_S,
    MIN_HANG_AFTER_S,
    RootCauseSettings,
    check_hang_settings,
    check_restart_policy,
    check_settings,
)
from rootcause_engine.straggler.settings import StragglerCheck, StragglerConfigError


@dataclasses.dataclass(kw_only=True)
class Config(RootCauseSettings):
    """A front-end's config in miniature: the root-cause fields plus the ``Elastic`` fields they are checked with."""

    monitor_interval: float = 0.2
    nnodes: Any = 1
    max_restarts: int = 0
    nccl_async_error_handling: int | None = None


def test_the_defaults_pass_every_check_and_wait_agreement_plus_teardown_for_the_root_cause() -> None:
    config = Config()
    assert (config.restart_policy, config.teardown_grace_s) == ("hard", DEFAULT_TEARDOWN_GRACE_S)
    assert config.root_cause_wait_s == DEFAULT_AGREEMENT_TIMEOUT_S + DEFAULT_TEARDOWN_GRACE_S
    assert Config(agreement_timeout_s=3, teardown_grace_s=2).root_cause_wait_s == 5.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"monitor_interval": 0}, "monitor_interval must be > 0 seconds, got 0"),
        ({"teardown_grace_s": -0.5}, "teardown_grace_s must be >= 0 seconds, got -0.5"),
        ({"agent_watchdog_interval_s": 0}, "agent_watchdog_interval_s must be > 0 seconds"),
        ({"agent_hang_timeout_s": 5.2}, "agent_hang_timeout_s (5.2) must exceed monitor_interval + teardown_grace_s"),
        ({"collective_timeout_s": 0}, "collective_timeout_s must be > 0 seconds"),
        ({"flight_recorder_entries": 0}, "flight_recorder_entries must be >= 1 or None, got 0"),
        ({"flight_recorder_entries": True}, "flight_recorder_entries must be >= 1 or None, got True"),
        ({"agreement_timeout_s": 0}, "agreement_timeout_s must be > 0 seconds"),
        ({"rank_0_outputs_timeout_s": -1}, "rank_0_outputs_timeout_s must be > 0 seconds"),
        ({"heartbeat_interval_s": 0}, "heartbeat_interval_s must be > 0"),
        ({"lost_after_s": 1.0}, "lost_after_s must be at least 4 heartbeats"),
        ({"hang_after_s": MIN_HANG_AFTER_S - 1}, "hang_after_s must be >= 10 seconds"),
        ({"hang_after_s": True}, "hang_after_s must be >= 10 seconds"),
        ({"hang_idle_cpu_fraction": 1.0}, "hang_idle_cpu_fraction must be between 0 and 1"),
        ({"hang_idle_cpu_fraction": 0}, "hang_idle_cpu_fraction must be between 0 and 1"),
        ({"io_wait_after_s": 5}, "io_wait_after_s must be >= 10 seconds"),
        ({"restart_policy": "gentle"}, "restart_policy must be one of ('hard', 'soft'), got 'gentle'"),
        ({"soft_restart_timeout_s": 0}, "soft_restart_timeout_s must be > 0 seconds"),
    ],
)
def test_a_value_no_launch_could_use_is_refused_when_the_config_is_built(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        Config(**fields)
    assert message in str(refused.value)


def test_the_hang_timeout_must_leave_room_for_one_poll_and_the_whole_teardown() -> None:
    with pytest.raises(ValueError, match=r"\(5.2 s\)"):
        Config(monitor_interval=0.2, teardown_grace_s=5, agent_hang_timeout_s=5.2)
    assert Config(monitor_interval=0.2, teardown_grace_s=5, agent_hang_timeout_s=5.3).agent_hang_timeout_s == 5.3


def test_optional_watches_may_be_switched_off_with_none() -> None:
    config = Config(collective_timeout_s=None, flight_recorder_entries=None, lost_after_s=None, hang_after_s=None)
    assert (config.collective_timeout_s, config.hang_after_s, config.lost_after_s) == (None, None, None)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nnodes": 2, "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"nnodes": "2:1", "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"nnodes": "0:2", "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"nnodes": "a:2", "max_restarts": 1}, "got nnodes='a:2'"),
        ({"nnodes": "1:2", "max_restarts": 0}, "needs max_restarts >= 1 (each soft restart of a node uses one), got 0"),
        ({"nnodes": "1:2", "max_restarts": 1, "nccl_async_error_handling": 3},
         "cannot use nccl_async_error_handling=3"),
    ],
)
def test_a_soft_policy_the_job_s_shape_cannot_support_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        Config(restart_policy="soft", **fields)
    assert message in str(refused.value)


def test_a_soft_policy_with_a_node_range_and_a_restart_is_accepted() -> None:
    config = Config(restart_policy="soft", nnodes=" 1 : 3 ", max_restarts=2, nccl_async_error_handling=2)
    assert config.restart_policy == "soft"
    check_restart_policy(config)  # called again by a front-end: still nothing to refuse
    assert config.nnodes == " 1 : 3 "


def test_the_shape_of_the_job_matters_only_to_the_soft_policy() -> None:
    """A hard policy takes any nnodes and no restarts: torch's own behaviour."""
    config = Config(restart_policy="hard", nnodes=4, max_restarts=0, nccl_async_error_handling=3)
    assert config.nccl_async_error_handling == 3


def test_the_checks_read_any_object_with_the_fields_and_io_wait_defaults_when_absent() -> None:
    """``check_hang_settings`` serves front-ends whose config has no ``io_wait_after_s``."""

    class Minimal:
        hang_after_s = None
        hang_idle_cpu_fraction = 0.5

    check_hang_settings(Minimal())
    Minimal.hang_idle_cpu_fraction = 1.5
    with pytest.raises(ValueError, match=r"got 1\.5$"):
        check_hang_settings(Minimal())


def test_check_settings_stops_at_the_first_bad_value() -> None:
    config = Config()
    config.monitor_interval = -1
    config.teardown_grace_s = -1
    with pytest.raises(ValueError, match=r"^monitor_interval must be > 0 seconds, got -1$"):
        check_settings(config)


def test_a_straggler_check_is_validated_against_the_job_s_shape() -> None:
    with pytest.raises(StragglerConfigError, match="needs nnodes as a range"):
        Config(nnodes=2, straggler_check=StragglerCheck(action="exclude"))
    with pytest.raises(StragglerConfigError, match="must be a StragglerCheck"):
        Config(straggler_check="fast please")  # type: ignore[arg-type]
    check = StragglerCheck(action="exclude")
    assert Config(nnodes="1:2", max_restarts=1, straggler_check=check).straggler_check is check


def test_restart_policies_are_torch_s_and_the_soft_one() -> None:
    assert settings.RESTART_POLICIES == ("hard", "soft")
