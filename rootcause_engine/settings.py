"""The root-cause settings both front-ends' configs carry, and the checks they get before any launch.

Both flavours' ``ElasticRootCause`` (flytekit's and Flyte 2's) add the same root-cause fields to their
own ``Elastic``: they are declared once here (:class:`RootCauseSettings`, keyword-only so that
``Elastic``'s positional arguments keep their places) and each config inherits them. A bad value
must fail when the config is built, with a message that says what to change, never later inside a
pod: :meth:`RootCauseSettings.__post_init__` runs :func:`check_settings` and the straggler check's
validation; each front-end checks its own ``Elastic``'s fields itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rootcause_core.liveness import HEARTBEAT_INTERVAL_S, SILENCE_LIMIT_S, liveness_problem

if TYPE_CHECKING:
    from rootcause_engine.straggler.settings import StragglerCheck

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
#: How long a failing pod waits for the other failing pods' word (``agent.agreement``). The pods of a
#: failed job diagnose within moments of each other: the others are told of the first failure
#: through the store and end their workers at once.
DEFAULT_AGREEMENT_TIMEOUT_S = 10.0

#: How long a pod without global rank 0 waits, after a launch that succeeded, for rank 0's pod to
#: write the task's outputs (or an error document) before it fails instead of exiting 0
#: (:mod:`rootcause_engine.agent.rank_0_outputs`). Rank 0's pod converts and uploads its value after
#: the exit barrier, usually within a second or two; two minutes leave room for a value of some GB
#: uploaded from the pod, and keep a job whose rank-0 pod died after training from holding its
#: nodes for long before it is retried. A task returning larger values raises it.
DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S = 120.0

#: Flight Recorder ring size (collectives remembered per process): torch's documented example value;
#: a few hundred KB per process. It is what names a rank that never entered a collective.
DEFAULT_FLIGHT_RECORDER_ENTRIES = 2000

#: How long a rank may make no progress (no CPU time, no I/O) while a peer waits for it in a collective
#: or a send/recv it has not entered before the hang watch names it hung and ends the job, long before
#: any collective timeout (``agent.hang_watch``; docs/hung_ranks.md has the measurements and the
#: trade-off: a hang named, and every pod gone, within 150 s on a busy machine, against the longest
#: block without CPU or I/O a healthy rank may go through, such as a filesystem call in state D).
DEFAULT_HANG_AFTER_S = 60.0
#: The fraction of one core below which a rank's process tree counts as idle (measured with
#: ``benchmarks/progress_noise.py``: an idle worker spends 0.16 to 0.55 %; docs/hung_ranks.md).
DEFAULT_HANG_IDLE_CPU_FRACTION = 0.01
#: How long a rank whose main thread is blocked in a file, pipe or network-filesystem read or write
#: (state ``D``, or asleep in ``pipe_read``, ``nfs_*``, ``rpc_*``...: ``agent.thread_wait``) may make no
#: progress while a peer waits for it before the hang watch names it (the longer of this and
#: ``hang_after_s`` applies): an NFS failover or a storage stall returns, a stuck program does not.
DEFAULT_IO_WAIT_AFTER_S = 600.0
#: The shortest ``hang_after_s``: the watch looks every 2 s, and a stall needs several looks.
MIN_HANG_AFTER_S = 10.0



#: ``restart_policy`` values: torch's own (every worker restarts), and the soft-restart RFC's
#: ``soft-no-replace`` (only the failed node's workers restart; see ``rootcause_engine.soft_restart``).
RESTART_POLICIES = ("hard", "soft")

#: torch's NCCL error-handling mode that ends the process without aborting (SkipCleanUp).
_NCCL_SKIP_CLEAN_UP = 3


@dataclass(kw_only=True)
class RootCauseSettings:
    """The root-cause fields of both flavours' ``ElasticRootCause`` (a config inherits them with its
    ``Elastic``: ``class ElasticRootCause(RootCauseSettings, Elastic)``).

    Args:
        teardown_grace_s: seconds the surviving workers get between SIGTERM and SIGKILL.
        straggler_check: optional ``StragglerCheck`` run by every worker inside the launch before the
            user's function (``docs/straggler.md``).
        agent_watchdog: end a hung agent only after writing the root cause, in place of a silent
            exit (``docs/teardown_watchdog.md``).
        agent_watchdog_interval_s: seconds between the watchdog's checks.
        agent_hang_timeout_s: seconds the agent may go without finishing after a worker failed.
        collective_timeout_s: default timeout of process groups created without an explicit
            ``timeout``, on every backend (``None``: torch's default, 10 min for NCCL and 30 min for
            other backends).
        unbuffered_output: ``PYTHONUNBUFFERED=1`` if unset, so a killed worker's last lines reach the log.
        hang_probe: before tearing live workers down after a collective timeout, ask each for its
            stacks and its last collective (``docs/hung_ranks.md``), so a rank that hung is named.
        flight_recorder_entries: ``TORCH_FR_BUFFER_SIZE`` if the pod sets neither it nor
            ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (``None``: leave torch's default): torch's Flight
            Recorder, which numbers the collectives each rank entered (gloo and NCCL; CUDA builds
            keep 2000 NCCL entries by default).
        restart_policy: ``"hard"`` (torch's: any failure restarts every worker of the job) or ``"soft"``
            (the soft-restart RFC: only the failed node's workers restart, the others keep their
            processes and pause while the job scales down and up again; ``docs/soft_restarts.md``).
            ``"soft"`` needs ``nnodes`` as a range ``"min:max"`` and ``max_restarts >= 1``.
        soft_restart_timeout_s: how long a soft world change may take (members arriving, a restarted
            node's workers initialising).
        lost_after_s: how long a peer pod may send no heartbeat while the job is healthy before it is
            declared lost (a frozen node, a partition: ``docs/frozen_pods.md``); ``None``: no such watch.
        heartbeat_interval_s: how often each pod's agent beats (and reads its watched peer's beat);
            ``lost_after_s`` must span at least four beats. A longer interval lowers the rendezvous
            store's load at a thousand pods and more.
        agreement_timeout_s: how long a failing pod waits for the other failing pods' word before it
            proposes the job's report (every pod writes the agreed report, so the document present
            when the first pod exits names the job's root cause).
        rank_0_outputs_timeout_s: after a launch that succeeded, how long a pod without global rank 0
            waits for rank 0's pod to write the task's outputs (or an error document) before it fails,
            recoverably, instead of exiting 0 (the training operator marks the job Succeeded when any
            pod exits 0, and Flyte reads the outputs then; ``docs/settings.md``).
        hang_after_s: name a rank hung, and end the job, once it has made no progress (no CPU time,
            no I/O) for this long while a peer has waited this long for it in a collective or a
            send/recv it has not entered (``docs/hung_ranks.md``), instead of waiting for the
            collective timeout; ``None``: only at the collective timeout. It must exceed the longest
            time a healthy rank may block without CPU or I/O while its peers wait.
        hang_idle_cpu_fraction: the CPU (fraction of one core) below which a rank's process tree
            counts as making no progress.
        io_wait_after_s: in place of ``hang_after_s`` (the longer of the two applies), how long a rank
            whose main thread is blocked in a file, pipe or network-filesystem read or write (an NFS
            failover, a storage stall: its thread's state, kernel wait and system call say so) may make
            no progress before it is named hung. A rank stuck in user code (asleep, on a lock, stopped)
            is still named at ``hang_after_s``.
    """

    teardown_grace_s: float = DEFAULT_TEARDOWN_GRACE_S
    straggler_check: StragglerCheck | None = None
    agent_watchdog: bool = True
    agent_watchdog_interval_s: float = DEFAULT_AGENT_WATCHDOG_INTERVAL_S
    agent_hang_timeout_s: float = DEFAULT_AGENT_HANG_TIMEOUT_S
    collective_timeout_s: float | None = None
    unbuffered_output: bool = True
    hang_probe: bool = True
    flight_recorder_entries: int | None = DEFAULT_FLIGHT_RECORDER_ENTRIES
    restart_policy: str = "hard"
    soft_restart_timeout_s: float = DEFAULT_SOFT_RESTART_TIMEOUT_S
    lost_after_s: float | None = DEFAULT_LOST_AFTER_S
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    agreement_timeout_s: float = DEFAULT_AGREEMENT_TIMEOUT_S
    rank_0_outputs_timeout_s: float = DEFAULT_RANK_0_OUTPUTS_TIMEOUT_S
    hang_after_s: float | None = DEFAULT_HANG_AFTER_S
    hang_idle_cpu_fraction: float = DEFAULT_HANG_IDLE_CPU_FRACTION
    io_wait_after_s: float = DEFAULT_IO_WAIT_AFTER_S

    def __post_init__(self) -> None:
        """Refuse settings no launch could use; a front-end checks its own fields first, then calls this."""
        check_settings(self)
        if self.straggler_check is not None:
            from rootcause_engine.straggler.settings import validate_for_task  # the check's module, on demand

            validate_for_task(self.straggler_check, self.nnodes, self.max_restarts)  # type: ignore[attr-defined]

    @property
    def root_cause_wait_s(self) -> float:
        """How long a pod whose report names only victims waits for another pod's document naming
        the root cause before it writes its own: the failing pods' agreement time plus the culprit's
        teardown, the time the culprit's pod may take to diagnose and write (both flavours)."""
        return float(self.agreement_timeout_s) + float(self.teardown_grace_s)


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
    if config.agreement_timeout_s <= 0:
        raise ValueError(f"agreement_timeout_s must be > 0 seconds, got {config.agreement_timeout_s!r}")
    if config.rank_0_outputs_timeout_s <= 0:
        raise ValueError(f"rank_0_outputs_timeout_s must be > 0 seconds, got {config.rank_0_outputs_timeout_s!r}")
    if (problem := liveness_problem(config.heartbeat_interval_s, config.lost_after_s)) is not None:
        raise ValueError(problem)
    check_hang_settings(config)
    check_restart_policy(config)


def check_hang_settings(config: Any) -> None:
    """Refuse a hang watch that could not measure a stall (too short), or an idle CPU fraction outside (0, 1)."""
    after_s = config.hang_after_s
    if after_s is not None and (isinstance(after_s, bool) or not after_s >= MIN_HANG_AFTER_S):
        raise ValueError(
            f"hang_after_s must be >= {MIN_HANG_AFTER_S:g} seconds (or None: name a hung rank only at the "
            f"collective timeout), got {after_s!r}"
        )
    fraction = config.hang_idle_cpu_fraction
    if isinstance(fraction, bool) or not 0 < fraction < 1:
        raise ValueError(f"hang_idle_cpu_fraction must be between 0 and 1 (of one core), got {fraction!r}")
    io_after_s = getattr(config, "io_wait_after_s", DEFAULT_IO_WAIT_AFTER_S)
    if isinstance(io_after_s, bool) or not isinstance(io_after_s, int | float) or not io_after_s >= MIN_HANG_AFTER_S:
        raise ValueError(
            f"io_wait_after_s must be >= {MIN_HANG_AFTER_S:g} seconds (the longer of it and hang_after_s applies to a "
            f"rank blocked in a read or write), got {io_after_s!r}"
        )


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
