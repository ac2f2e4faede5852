"""The checks every front-end's config gets before any launch: the root-cause settings the engine reads.

Both flavours' ``ElasticRootCause`` (flytekit's and Flyte 2's) carry the same root-cause fields on
top of their own ``Elastic``; a bad value must fail when the config is built, with a message that
says what to change, never later inside a pod. Each front-end calls :func:`check_settings` from its
config's ``__post_init__`` and checks its own ``Elastic``'s fields itself.
"""

from __future__ import annotations

from typing import Any

from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S, liveness_problem

# The defaults of the root-cause settings, the same in both flavours' ``ElasticRootCause``.

#: How often the agent polls its workers. kfpytorch's default (5 s) and Flyte 2 Elastic's (3 s) delay
#: the teardown of the surviving workers; exact failure times come from the death watcher, so this
#: only bounds teardown latency.
#: ``benchmarks/elastic_rootcause.py`` measures the cost of polling this often.
DEFAULT_MONITOR_INTERVAL_S = 0.2

#: Seconds between SIGTERM and SIGKILL when the agent tears down the surviving workers
#: (torch 2.13 waits a hard-coded 30 s on the function-launch path).
DEFAULT_TEARDOWN_GRACE_S = 5.0

#: How often the agent watchdog looks for a hung agent (it only reads in-memory state and stats a
#: few error files, so once a second costs nothing measurable).
DEFAULT_AGENT_WATCHDOG_INTERVAL_S = 1.0

#: How long after a worker failure the agent may go without finishing (torch needs one monitor
#: interval plus one teardown grace); rendezvous and exit barrier get their own limits on top.
DEFAULT_AGENT_HANG_TIMEOUT_S = 60.0

#: How long a soft world change may take: members arriving at a new world, and a restarted node's
#: workers getting ready (their own initialisation, e.g. loading the model, included).
DEFAULT_SOFT_RESTART_TIMEOUT_S = 300.0

#: How long a peer pod may send no heartbeat while the job is healthy before it is declared lost
#: (a frozen or partitioned node closes no socket: without this its peers wait out the collective
#: timeout, 10 to 30 minutes), and how often the agents beat; docs/frozen_pods.md has the margin measured.
DEFAULT_LOST_AFTER_S = SILENCE_LIMIT_S
DEFAULT_HEARTBEAT_INTERVAL_S = HEARTBEAT_INTERVAL_S

#: Flight Recorder ring size (collectives remembered per process): torch's documented example value;
#: a few hundred KB per process. It is what names a rank that never entered a collective.
DEFAULT_FLIGHT_RECORDER_ENTRIES = 2000



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
