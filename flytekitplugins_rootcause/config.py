"""``ElasticRootCause``: kfpytorch's ``Elastic`` config plus the root-cause settings.

It subclasses ``Elastic`` (with the engine's ``RootCauseSettings``, the fields both flavours share) so
every ``Elastic`` field keeps its meaning and place and the task serializes to the same PyTorchJob
custom; only defaults that root-cause detection depends on change, and only where the user did not
set them.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from flytekitplugins.kfpytorch.task import Elastic

from rootcause_engine.settings import (
    DEFAULT_AGENT_HANG_TIMEOUT_S as DEFAULT_AGENT_HANG_TIMEOUT_S,
)
from rootcause_engine.settings import (
    DEFAULT_AGENT_WATCHDOG_INTERVAL_S as DEFAULT_AGENT_WATCHDOG_INTERVAL_S,
)
from rootcause_engine.settings import (
    DEFAULT_FLIGHT_RECORDER_ENTRIES as DEFAULT_FLIGHT_RECORDER_ENTRIES,
)
from rootcause_engine.settings import (
    DEFAULT_HEARTBEAT_INTERVAL_S as DEFAULT_HEARTBEAT_INTERVAL_S,
)
from rootcause_engine.settings import (
    DEFAULT_LOST_AFTER_S as DEFAULT_LOST_AFTER_S,
)
from rootcause_engine.settings import (
    DEFAULT_MONITOR_INTERVAL_S as DEFAULT_MONITOR_INTERVAL_S,
)
from rootcause_engine.settings import (
    DEFAULT_SOFT_RESTART_TIMEOUT_S as DEFAULT_SOFT_RESTART_TIMEOUT_S,
)
from rootcause_engine.settings import (
    DEFAULT_TEARDOWN_GRACE_S as DEFAULT_TEARDOWN_GRACE_S,
)
from rootcause_engine.settings import RESTART_POLICIES as RESTART_POLICIES
from rootcause_engine.settings import RootCauseSettings

#: NCCL's heartbeat monitor aborts a process whose NCCL watchdog thread is stuck this long
#: (torch's default is 480 s); see docs/settings.md.
DEFAULT_NCCL_HEARTBEAT_TIMEOUT_S = 300

#: TORCH_NCCL_ASYNC_ERROR_HANDLING=1: on a collective error or timeout, abort the communicator and
#: end the process (with SIGABRT), so the failure becomes visible instead of a hang.
DEFAULT_NCCL_ASYNC_ERROR_HANDLING = 1

@dataclass
class ElasticRootCause(RootCauseSettings, Elastic):
    """Configuration of a torch elastic task that reports its true root-cause failure.

    Use exactly like ``Elastic``: ``@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=4))``.

    Args (in addition to ``Elastic``'s; the root-cause settings both flavours share are
    :class:`rootcause_engine.settings.RootCauseSettings`'s, keyword-only: ``teardown_grace_s``,
    ``straggler_check``, the agent watchdog's, ``collective_timeout_s``, ``unbuffered_output``,
    ``hang_probe``, ``flight_recorder_entries``, ``restart_policy``, ``soft_restart_timeout_s``,
    ``lost_after_s``, ``heartbeat_interval_s``, ``agreement_timeout_s``, ``rank_0_outputs_timeout_s``,
    ``hang_after_s``, ``hang_idle_cpu_fraction``, ``io_wait_after_s``):
        monitor_interval: seconds between the agent's health checks (``Elastic``'s default is 5).
        per_worker_error_files: write one ``error-<worker>-<uuid>.<listing key>.pb`` per pod (the patched
            entrypoint), even when the backend did not set ``FLYTE_INTERNAL_DIST_ERROR_STRATEGY``.
        error_pb_if_absent: also create ``error.pb`` only if no pod created it yet, so backends
            that read only ``error.pb`` see the earliest writer's error instead of the latest.
        nccl_heartbeat_timeout_s: ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` if the pod does not set it
            (``None``: leave torch's default).
        nccl_async_error_handling: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` if the pod does not set it (under
            ``restart_policy="soft"`` the default 1 becomes 2: abort the communicators, keep the process).
    """

    monitor_interval: float = DEFAULT_MONITOR_INTERVAL_S  # type: ignore[assignment]
    per_worker_error_files: bool = True
    error_pb_if_absent: bool = True
    nccl_heartbeat_timeout_s: int | None = DEFAULT_NCCL_HEARTBEAT_TIMEOUT_S
    nccl_async_error_handling: int | None = DEFAULT_NCCL_ASYNC_ERROR_HANDLING

    def __post_init__(self) -> None:
        if self.nccl_heartbeat_timeout_s is not None and self.nccl_heartbeat_timeout_s <= 0:
            raise ValueError(f"nccl_heartbeat_timeout_s must be > 0 seconds, got {self.nccl_heartbeat_timeout_s!r}")
        if self.nccl_async_error_handling not in (None, 0, 1, 2, 3):
            raise ValueError(
                f"nccl_async_error_handling must be 0, 1, 2, 3 or None, got {self.nccl_async_error_handling!r}"
            )
        super().__post_init__()
        _load_task_type()
        _warn_where_defined(self.restart_policy)


#: The module that defines and registers this config's task type (``ElasticRootCauseFunctionTask``).
TASK_TYPE_MODULE = "flytekitplugins_rootcause.task"


def _load_task_type() -> None:
    """Make sure ``@task(task_config=ElasticRootCause(...))`` finds its task type.

    flytekit looks the task type up by the config's exact class and silently falls back to a plain
    Python task when none is registered, so registration must have happened by the time a config
    exists, whichever module the user imported the config from. The task module registers itself
    on import; it is loaded here by name, the way flytekit loads plugins, so this module and the
    task module (which imports this one) do not import each other.
    """
    if TASK_TYPE_MODULE not in sys.modules:
        importlib.import_module(TASK_TYPE_MODULE)




def _warn_where_defined(restart_policy: str) -> None:
    """Warn (``warnings.warn`` and the log, never an error) where the task is defined, so also at
    ``pyflyte run --remote``, when an upstream version is not verified or lacks an internal: the
    user hears it before the pods start, and the pods still train (they check again themselves)."""
    from flytekitplugins_rootcause.upstream import task_readiness

    task_readiness(restart_policy).announce(warn=True)
