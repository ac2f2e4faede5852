"""``ElasticRootCause``: Flyte 2's ``Elastic`` plugin config plus the root-cause settings.

A subclass of ``Elastic`` (with the engine's ``RootCauseSettings``, the fields both flavours share), so
every ``Elastic`` field keeps its meaning (``nnodes``, ``nproc_per_node``, ``rdzv_*``, ``run_policy``,
``max_restarts``, the ``nccl_*`` settings) and the task serializes to the same task type and
``DistributedPyTorchTrainingTask`` custom the backend already runs, positional arguments included
(the shared root-cause fields are keyword-only); only ``monitor_interval``'s default changes (``Elastic``'s 3 s
delays the teardown of the survivors).
"""

from __future__ import annotations

from dataclasses import dataclass

from flyteplugins.pytorch.task import Elastic

from flyteplugins.rootcause.upstream import check_flyte
from rootcause_engine.settings import DEFAULT_MONITOR_INTERVAL_S, RootCauseSettings


@dataclass
class ElasticRootCause(RootCauseSettings, Elastic):
    """Flyte 2's ``Elastic`` for a job that reports its true first failure, the same on every pod.

    Use it where ``Elastic`` goes: ``flyte.TaskEnvironment(name="train",
    plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=4))``.

    Args (in addition to ``Elastic``'s; the root-cause settings both flavours share are
    :class:`rootcause_engine.settings.RootCauseSettings`'s, keyword-only: ``teardown_grace_s``,
    ``straggler_check``, the agent watchdog's, ``collective_timeout_s``, ``unbuffered_output``,
    ``hang_probe``, ``flight_recorder_entries``, ``restart_policy``, ``soft_restart_timeout_s``,
    ``lost_after_s``, ``heartbeat_interval_s``, ``agreement_timeout_s``, ``rank_0_outputs_timeout_s``,
    ``hang_after_s``, ``hang_idle_cpu_fraction``, ``io_wait_after_s``; here
    ``collective_timeout_s`` covers every backend where ``Elastic.nccl_collective_timeout_sec`` sets
    NCCL's only, the agent watchdog replaces the zombie watchdog's silent ``os._exit(1)`` and writes
    the agreed root cause to ``error.pb``, and the straggler check's ``action="fail"`` raises a
    ``NonRecoverableError``):
        monitor_interval: seconds between the agent's health checks (``Elastic``'s default is 3).
    """

    monitor_interval: float = DEFAULT_MONITOR_INTERVAL_S  # type: ignore[assignment]

    def __post_init__(self) -> None:
        # the task is defined here (TaskEnvironment(plugin_config=...)): an unverified or incomplete
        # upstream is told now, as a warning (the pods check again, and train either way)
        check_flyte(self.restart_policy)
        if isinstance(self.nproc_per_node, bool) or not isinstance(self.nproc_per_node, int) or self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be a whole number >= 1, got {self.nproc_per_node!r}")
        if self.nccl_heartbeat_timeout_sec is not None and self.nccl_heartbeat_timeout_sec <= 0:
            raise ValueError(
                f"nccl_heartbeat_timeout_sec must be > 0 seconds or None, got {self.nccl_heartbeat_timeout_sec!r}"
            )
        super().__post_init__()
