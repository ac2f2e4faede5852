"""The checks every front-end's config gets before any launch: the root-cause settings the engine reads.

Both flavours' ``ElasticRootCause`` (flytekit's and Flyte 2's) carry the same root-cause fields on
top of their own ``Elastic``; a bad value must fail when the config is built, with a message that
says what to change, never later inside a pod. Each front-end calls :func:`check_settings` from its
config's ``__post_init__`` and checks its own ``Elastic``'s fields itself.
"""

from __future__ import annotations

from typing import Any

from rootcause_core.liveness import liveness_problem

#: ``restart_policy`` values: torch's own (every worker restarts), and the soft-restart RFC's
#: ``soft-no-replace`` (only the failed node's workers restart; see ``rootcause_engine.soft_restart``).
RESTART_POLICIES = ("hard", "soft")

#: torch's NCCL error-handling mode that ends the process without aborting (SkipCleanUp).
_NCCL_SKIP_CLEAN_UP = 3


def check_settings(config: Any) -> None:
    """Raise ``ValueError`` for the first root-cause setting of ``config`` no launch could use."""
    if config.monitor_interval <= 0:
        raise ValueError(f"monitor_interval must be > 0 seconds, got {config.monitor_interval!r}")
    if config.teardown_grace_s < 0:
        raise ValueError(f"teardown_grace_s must be >= 0 seconds, got {config.teardown_grace_s!r}")
    if config.agent_watchdog_interval_s <= 0:
        raise ValueError(f"agent_watchdog_interval_s must be > 0 seconds, got {config.agent_watchdog_interval_s!r}")
    if config.agent_hang_timeout_s <= config.monitor_interval + config.teardown_grace_s:
        raise ValueError(
            f"agent_hang_timeout_s ({config.agent_hang_timeout_s!r}) must exceed monitor_interval + "
            f"teardown_grace_s ({config.monitor_interval + config.teardown_grace_s:g} s): the agent needs that "
            "long to notice a failure and tear the other workers down"
        )
    if config.collective_timeout_s is not None and config.collective_timeout_s <= 0:
        raise ValueError(f"collective_timeout_s must be > 0 seconds, got {config.collective_timeout_s!r}")
    if config.flight_recorder_entries is not None and (
        isinstance(config.flight_recorder_entries, bool) or config.flight_recorder_entries < 1
    ):
        raise ValueError(f"flight_recorder_entries must be >= 1 or None, got {config.flight_recorder_entries!r}")
    if (problem := liveness_problem(config.heartbeat_interval_s, config.lost_after_s)) is not None:
        raise ValueError(problem)
    check_restart_policy(config)


def check_restart_policy(config: Any) -> None:
    """Refuse, before any launch, a soft restart policy the job's shape cannot support."""
    if config.restart_policy not in RESTART_POLICIES:
        raise ValueError(f"restart_policy must be one of {RESTART_POLICIES}, got {config.restart_policy!r}")
    if config.soft_restart_timeout_s <= 0:
        raise ValueError(f"soft_restart_timeout_s must be > 0 seconds, got {config.soft_restart_timeout_s!r}")
    if config.restart_policy != "soft":
        return
    low, _, high = str(config.nnodes).partition(":")
    if not high or not low.strip().isdigit() or not high.strip().isdigit() or int(low) > int(high) or int(low) < 1:
        raise ValueError(
            f'restart_policy="soft" needs nnodes as a range "min:max" (e.g. "1:2" for 2 pods that may go on '
            f"with 1 while a failed one restarts), got nnodes={config.nnodes!r}"
        )
    if config.nccl_async_error_handling == _NCCL_SKIP_CLEAN_UP:
        raise ValueError(
            'restart_policy="soft" cannot use nccl_async_error_handling=3 (SkipCleanUp): it ends the process on a '
            "collective error, survivors included; leave the default (2 under the soft policy: abort the "
            "communicators, keep the process)"
        )
    if config.max_restarts < 1:
        raise ValueError(
            f'restart_policy="soft" needs max_restarts >= 1 (each soft restart of a node uses one), '
            f"got {config.max_restarts!r}"
        )
