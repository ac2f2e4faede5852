"""``ElasticRootCause``: Flyte 2's ``Elastic`` plugin config plus the root-cause settings.

A plain subclass, so every ``Elastic`` field keeps its meaning (``nnodes``, ``nproc_per_node``,
``rdzv_*``, ``run_policy``, ``max_restarts``, the ``nccl_*`` settings) and the task serializes to the
same task type and ``DistributedPyTorchTrainingTask`` custom the backend already runs, positional
arguments included (the added fields come after ``Elastic``'s); only ``monitor_interval``'s default
changes (``Elastic``'s 3 s delays the teardown of the survivors).
"""

from __future__ import annotations

from dataclasses import dataclass

from flyteplugins.pytorch.task import Elastic

from rootcause_engine.agent.agreement import DEFAULT_AGREEMENT_TIMEOUT_S
from rootcause_engine.settings import (
    DEFAULT_AGENT_HANG_TIMEOUT_S,
    DEFAULT_AGENT_WATCHDOG_INTERVAL_S,
    DEFAULT_FLIGHT_RECORDER_ENTRIES,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_LOST_AFTER_S,
    DEFAULT_MONITOR_INTERVAL_S,
    DEFAULT_SOFT_RESTART_TIMEOUT_S,
    DEFAULT_TEARDOWN_GRACE_S,
    check_settings,
)
from rootcause_engine.straggler.settings import StragglerCheck, validate_for_task


@dataclass
class ElasticRootCause(Elastic):
    """Flyte 2's ``Elastic`` for a job that reports its true first failure, the same on every pod.

    Use it where ``Elastic`` goes: ``flyte.TaskEnvironment(name="train",
    plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=4))``.

    Args (in addition to ``Elastic``'s):
        teardown_grace_s: seconds the surviving workers get between SIGTERM and SIGKILL.
        agent_watchdog: replace the zombie watchdog's silent ``os._exit(1)`` with the engine's watchdog,
            which ends a hung agent only after writing the agreed root cause to ``error.pb``.
        agent_watchdog_interval_s: seconds between the watchdog's checks.
        agent_hang_timeout_s: seconds the agent may go without finishing after a worker failed.
        collective_timeout_s: default timeout of process groups created without an explicit ``timeout``
            on every backend (``Elastic.nccl_collective_timeout_sec`` sets NCCL's only).
        unbuffered_output: ``PYTHONUNBUFFERED=1`` if unset, so a killed worker's last lines reach the log.
        hang_probe: before ending live workers after a collective timeout, ask each for its stacks and
            its last collective, so a rank that hung is named (``docs/hung_ranks.md``).
        flight_recorder_entries: ``TORCH_FR_BUFFER_SIZE`` if the pod sets neither it nor
            ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (``None``: torch's default).
        restart_policy: ``"hard"`` (torch's: any failure restarts every worker) or ``"soft"`` (only the
            failed node's workers restart, the others pause: ``docs/soft_restarts.md``); ``"soft"`` needs
            ``nnodes`` as a range ``"min:max"`` and ``max_restarts >= 1``.
        soft_restart_timeout_s: how long a soft world change may take.
        lost_after_s: how long a peer pod may send no heartbeat while the job is healthy before it is
            declared lost (``None``: no such watch); ``heartbeat_interval_s``: how often pods beat.
        agreement_timeout_s: how long a failing pod waits for the other failing pods' word before it
            writes the report made of the words it has (``rootcause_engine.agent.agreement``).
        straggler_check: optional ``StragglerCheck`` (``from flyteplugins.rootcause import
            StragglerCheck``) run by every worker inside the launch before the user's function, as on
            flytekit (``docs/straggler.md``): the table in the pod log and, with ``report=True``, a
            "Straggler check" report tab; ``action="fail"`` raises a ``NonRecoverableError``.
    """

    monitor_interval: float = DEFAULT_MONITOR_INTERVAL_S  # type: ignore[assignment]
    teardown_grace_s: float = DEFAULT_TEARDOWN_GRACE_S
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
    straggler_check: StragglerCheck | None = None

    def __post_init__(self) -> None:
        if isinstance(self.nproc_per_node, bool) or not isinstance(self.nproc_per_node, int) or self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be a whole number >= 1, got {self.nproc_per_node!r}")
        if self.agreement_timeout_s <= 0:
            raise ValueError(f"agreement_timeout_s must be > 0 seconds, got {self.agreement_timeout_s!r}")
        if self.nccl_heartbeat_timeout_sec is not None and self.nccl_heartbeat_timeout_sec <= 0:
            raise ValueError(
                f"nccl_heartbeat_timeout_sec must be > 0 seconds or None, got {self.nccl_heartbeat_timeout_sec!r}"
            )
        check_settings(self)
        if self.straggler_check is not None:
            validate_for_task(self.straggler_check, self.nnodes, self.max_restarts)
