"""``ElasticRootCause``: kfpytorch's ``Elastic`` config plus the root-cause settings.

It is a plain subclass so every ``Elastic`` field keeps its meaning and the task serializes to the
same PyTorchJob custom; only defaults that root-cause detection depends on change, and only where the
user did not set them.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from rootcause_engine.settings import check_settings

if TYPE_CHECKING:
    from rootcause_engine.straggler.settings import StragglerCheck

#: NCCL's heartbeat monitor aborts a process whose NCCL watchdog thread is stuck this long
#: (torch's default is 480 s); see docs/settings.md.
DEFAULT_NCCL_HEARTBEAT_TIMEOUT_S = 300

#: TORCH_NCCL_ASYNC_ERROR_HANDLING=1: on a collective error or timeout, abort the communicator and
#: end the process (with SIGABRT), so the failure becomes visible instead of a hang.
DEFAULT_NCCL_ASYNC_ERROR_HANDLING = 1

@dataclass
class ElasticRootCause(Elastic):
    """Configuration of a torch elastic task that reports its true root-cause failure.

    Use exactly like ``Elastic``: ``@task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=4))``.

    Args (in addition to ``Elastic``'s):
        monitor_interval: seconds between the agent's health checks (``Elastic``'s default is 5).
        per_worker_error_files: write one ``error-<worker>-<uuid>.<listing key>.pb`` per pod (the patched
            entrypoint), even when the backend did not set ``FLYTE_INTERNAL_DIST_ERROR_STRATEGY``.
        error_pb_if_absent: also create ``error.pb`` only if no pod created it yet, so backends
            that read only ``error.pb`` see the earliest writer's error instead of the latest.
        teardown_grace_s: seconds the surviving workers get between SIGTERM and SIGKILL.
        straggler_check: optional ``StragglerCheck`` run inside the launch before the user's function.
        agent_watchdog: end a hung agent after writing the root cause (``docs/teardown_watchdog.md``).
        agent_watchdog_interval_s: seconds between the watchdog's checks.
        agent_hang_timeout_s: seconds the agent may go without finishing after a worker failed.
        nccl_heartbeat_timeout_s: ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` if the pod does not set it
            (``None``: leave torch's default).
        nccl_async_error_handling: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` if the pod does not set it (under
            ``restart_policy="soft"`` the default 1 becomes 2: abort the communicators, keep the process).
        collective_timeout_s: default timeout of process groups created without an explicit
            ``timeout`` (``None``: torch's default, 10 min for NCCL and 30 min for other backends).
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
    """

    monitor_interval: float = DEFAULT_MONITOR_INTERVAL_S  # type: ignore[assignment]
    per_worker_error_files: bool = True
    error_pb_if_absent: bool = True
    teardown_grace_s: float = DEFAULT_TEARDOWN_GRACE_S
    straggler_check: StragglerCheck | None = None
    agent_watchdog: bool = True
    agent_watchdog_interval_s: float = DEFAULT_AGENT_WATCHDOG_INTERVAL_S
    agent_hang_timeout_s: float = DEFAULT_AGENT_HANG_TIMEOUT_S
    nccl_heartbeat_timeout_s: int | None = DEFAULT_NCCL_HEARTBEAT_TIMEOUT_S
    nccl_async_error_handling: int | None = DEFAULT_NCCL_ASYNC_ERROR_HANDLING
    collective_timeout_s: float | None = None
    unbuffered_output: bool = True
    hang_probe: bool = True
    flight_recorder_entries: int | None = DEFAULT_FLIGHT_RECORDER_ENTRIES
    restart_policy: str = "hard"
    soft_restart_timeout_s: float = DEFAULT_SOFT_RESTART_TIMEOUT_S
    lost_after_s: float | None = DEFAULT_LOST_AFTER_S
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S

    def __post_init__(self) -> None:
        check_settings(self)
        if self.nccl_heartbeat_timeout_s is not None and self.nccl_heartbeat_timeout_s <= 0:
            raise ValueError(f"nccl_heartbeat_timeout_s must be > 0 seconds, got {self.nccl_heartbeat_timeout_s!r}")
        if self.nccl_async_error_handling not in (None, 0, 1, 2, 3):
            raise ValueError(
                f"nccl_async_error_handling must be 0, 1, 2, 3 or None, got {self.nccl_async_error_handling!r}"
            )
        if self.straggler_check is not None:
            from rootcause_engine.straggler.settings import validate_for_task

            validate_for_task(self.straggler_check, self.nnodes, self.max_restarts)
        _load_task_type()


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


