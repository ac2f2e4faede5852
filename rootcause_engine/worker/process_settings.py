"""NCCL and process settings that keep one failed worker from becoming a hung or silent pod. A
setting works only where and when its reader reads it. So what a worker reads at its start-up is set
in the agent's environment before the launch, and put back after it (:func:`agent_environment`).
What lives in the worker's Python state is set in the worker, before the user's function
(:class:`WorkerProcessSettings`). ``docs/settings.md`` has each default and why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from rootcause_engine import soft_restart
from rootcause_engine.upstream.torch_worker import (
    FLIGHT_RECORDER_BUFFER_VAR,
    FLIGHT_RECORDER_NCCL_BUFFER_VAR,
    set_default_collective_timeout,
    worker_error_file,
)
from rootcause_engine.worker.hang_probe import install_hang_probe
from rootcause_engine.worker.point_to_point import record_point_to_point
from rootcause_engine.worker.progress_beacon import (
    BEACON_INTERVAL_S,
    BEACON_INTERVAL_VARIABLE,
    beacon_interval,
    start_progress_beacon,
)

#: Seconds without a heartbeat from NCCL's watchdog thread before its monitor aborts the process.
NCCL_HEARTBEAT_TIMEOUT_VAR = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
#: What the NCCL watchdog does on a failed or timed-out collective (1: abort comms, end process).
NCCL_ASYNC_ERROR_HANDLING_VAR = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
OMP_NUM_THREADS_VAR = "OMP_NUM_THREADS"
#: ``1``: workers get a store of their own, on the first rank's pod, in place of torch's shared
#: rendezvous store. torch 2.13's hard restarts of a multi-pod job never finish
#: ``init_process_group`` with the shared one (restarted workers read the previous attempt's keys;
#: plain ``Elastic`` too, ``docs/soft_restarts.md``), so a hard policy that restarts sets it.
UNSHARED_WORKER_STORE_VAR = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
PYTHONUNBUFFERED_VAR = "PYTHONUNBUFFERED"


#: torch's NCCL error-handling modes: 1 (TearDown) aborts the communicators and ends the process;
#: 2 (CleanUpOnly) aborts them and keeps the process, which is what a soft-restart survivor needs.
NCCL_TEAR_DOWN, NCCL_CLEAN_UP_ONLY = 1, 2


def nccl_error_handling(config: Any) -> int | None:
    """The NCCL error-handling mode for ``config``: under ``restart_policy="soft"`` the tear-down
    default becomes clean-up-only, so a survivor's failed collective raises instead of ending it."""
    mode = config.nccl_async_error_handling
    if getattr(config, "restart_policy", "hard") == "soft" and mode == NCCL_TEAR_DOWN:
        return NCCL_CLEAN_UP_ONLY
    return mode


def agent_environment(config: Any) -> dict[str, str]:
    """The variables ``config`` asks for (before looking at what the user already set). Pure."""
    wanted: dict[str, str] = {}
    if config.nccl_heartbeat_timeout_s is not None:
        wanted[NCCL_HEARTBEAT_TIMEOUT_VAR] = str(int(config.nccl_heartbeat_timeout_s))
    if (mode := nccl_error_handling(config)) is not None:
        wanted[NCCL_ASYNC_ERROR_HANDLING_VAR] = str(int(mode))
    if int(config.nproc_per_node) > 1:  # as torchrun and kfpytorch do; set it in the pod to change it
        wanted[OMP_NUM_THREADS_VAR] = "1"
    if config.unbuffered_output:
        wanted[PYTHONUNBUFFERED_VAR] = "1"
    if config.flight_recorder_entries is not None:
        wanted[FLIGHT_RECORDER_BUFFER_VAR] = str(int(config.flight_recorder_entries))
    if config.restart_policy == "hard" and int(config.max_restarts) >= 1:
        wanted[UNSHARED_WORKER_STORE_VAR] = "1"
    if config.hang_after_s is not None:  # the agent's hang watch reads each worker's beacon
        wanted[BEACON_INTERVAL_VARIABLE] = str(BEACON_INTERVAL_S)
    return wanted


def unset_only(wanted: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``wanted`` the environment does not set yet (a user's value always wins). Pure.

    The Flight Recorder's size counts as set when the pod sets either of torch's names for it.
    """
    applied = {name: value for name, value in wanted.items() if name not in environ}
    if FLIGHT_RECORDER_NCCL_BUFFER_VAR in environ:
        applied.pop(FLIGHT_RECORDER_BUFFER_VAR, None)
    return applied


@contextlib.contextmanager
def applied_environment(
    wanted: Mapping[str, str], environ: MutableMapping[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """Set the unset ones of ``wanted`` for the block; remove exactly those afterwards.

    Yields what was applied. ``os.environ`` writes go through ``putenv``, so forked and spawned
    workers, and the C++ code in them, see the values.
    """
    target = os.environ if environ is None else environ
    applied = unset_only(wanted, target)
    target.update(applied)
    try:
        yield applied
    finally:
        for name, value in applied.items():
            if target.get(name) == value:
                del target[name]


def _line_buffer_stdio() -> None:
    """What ``PYTHONUNBUFFERED`` does at start-up, for forked workers whose streams already exist."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):
                reconfigure(line_buffering=True, write_through=True)


@dataclasses.dataclass(frozen=True)
class WorkerProcessSettings:
    """Worker-side settings, applied in each worker before the user's function (picklable)."""

    collective_timeout_s: float | None = None
    hang_probe: bool = False

    def __call__(self) -> None:
        if self.collective_timeout_s is not None:
            set_default_collective_timeout(self.collective_timeout_s)
        if self.hang_probe:
            install_hang_probe(worker_error_file())
            record_point_to_point()
        if (interval := beacon_interval()) is not None:  # the agent's hang watch is on
            start_progress_beacon(worker_error_file(), interval)
        if os.environ.get(PYTHONUNBUFFERED_VAR):
            _line_buffer_stdio()
        if soft_restart.enabled():  # a soft-restart worker: its groups are left as reinitialize leaves them
            soft_restart.follow_process_groups()


@dataclasses.dataclass(frozen=True)
class BeforeUserFunction:
    """Several worker-side hooks run in order as one ``before_user_function`` (picklable).

    ``RecordingTaskFunction`` takes a single callable; the process settings and the straggler
    pre-check each bring one, so the task composes them with :func:`before_user_function`.
    """

    hooks: tuple[Callable[[], None], ...]

    def __call__(self) -> None:
        for hook in self.hooks:
            hook()


def before_user_function(hooks: Sequence[Callable[[], None] | None]) -> Callable[[], None] | None:
    """One callable running every given hook in order (``None`` entries skipped; ``None`` if empty)."""
    present = tuple(hook for hook in hooks if hook is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else BeforeUserFunction(present)
