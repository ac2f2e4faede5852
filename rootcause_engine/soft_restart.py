"""Soft restarts: the worker runtime API of torch's soft-restart RFC, for ``restart_policy="soft"``. A
hard restart kills every worker of the job for one failed node, and with them their model,
optimizer and data loader state. Under soft restarts only the failed node's workers restart. The
others pause, form a new world without it, and take it back once it is ready. A training loop calls
:func:`reinitialize` for each new world and :func:`world_changed` at a step boundary.
:func:`is_peer_failure` tells a peer's failure from the worker's own error. ``docs/soft_restarts.md``
shows such a loop and says what survivors must hold.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from rootcause_engine.thread_guard import Duty, LoopGuard, worker_watch
from rootcause_engine.worker.world_events import (
    EVENTS_DIR_VARIABLE,
    WorkerEvent,
    WorkerInfo,
    WorkerState,
    WorldChangeEvent,
    events_path,
    read_events,
    waiting_path,
)

__all__ = [
    "WorkerEvent",
    "WorkerInfo",
    "WorkerState",
    "WorldChangeEvent",
    "current_world_version",
    "enabled",
    "follow_process_groups",
    "get_worker_event",
    "get_worker_info",
    "is_peer_failure",
    "reinitialize",
    "world_changed",
]

#: How long :func:`is_peer_failure` waits for the agent's word on an error whose text names no peer:
#: the agent learns of a peer's failure within its monitor interval and the peers' announcements.
PEER_FAILURE_WAIT_S = 5.0
#: How often a training worker's world watcher looks at its channel file (a ``stat``).
WATCH_INTERVAL_S = 0.05
#: How often a waiting worker looks at its channel file.
POLL_INTERVAL_S = 0.005
#: How long :func:`get_worker_info` waits for a HEALTHY world by default: gloo's default collective
#: timeout, so a worker waits for a new world as long as it would have waited in a collective.
DEFAULT_WAIT_S = 1800.0


class _Channel:
    """This process's channel file, read again only when it changed."""

    def __init__(self) -> None:
        directory = os.environ.get(EVENTS_DIR_VARIABLE)
        if not directory:
            raise RuntimeError(
                f"no soft-restart channel: {EVENTS_DIR_VARIABLE} is not set. The soft-restart API works in the "
                'workers of an ElasticRootCause(..., restart_policy="soft") task only.'
            )
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.path = events_path(directory, local_rank)
        self.waiting = waiting_path(directory, local_rank)
        self._cached: tuple[tuple[int, int] | None, WorkerEvent | None] = (None, None)  # (file's size and time, event)
        self.version: int | None = None  # the world of the process group this process made
        #: when the agent announced that world (its HEALTHY event's timestamp): a PAUSED from before
        #: it belongs to an earlier world, and must not end this group (:func:`_scaled_down_since_the_group`)
        self.group_since: float | None = None
        self.transport_fds: set[int] = set()  # the sockets that group opened (see _abort_gloo_transport)
        #: the world whose group the world watcher already left (its collectives raise from then on)
        self.interrupted_version: int | None = None
        #: version, group_since, transport_fds, interrupted_version: the watcher decides on them and acts under it
        self.lock = threading.Lock()

    def latest(self) -> WorkerEvent | None:
        """The file's last event, read again only when the file changed. No lock: the training thread
        and the watcher may both read; the cache is one tuple, replaced whole (at worst read twice)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        key = (stat.st_size, stat.st_mtime_ns)
        seen, latest = self._cached
        if key != seen:
            events = read_events(self.path)
            latest = events[-1] if events else None
            self._cached = (key, latest)
        return latest

    def say_waiting(self) -> None:
        """Tell the agent this process waits for a world (written whole: a rename)."""
        partial = self.waiting.with_name(f".{self.waiting.name}.{os.getpid()}")
        partial.write_text(str(os.getpid()))
        partial.replace(self.waiting)


_channel: _Channel | None = None


def _this_channel() -> _Channel:
    global _channel
    if _channel is None or _channel.path.parent != Path(os.environ.get(EVENTS_DIR_VARIABLE, "")):
        _channel = _Channel()
    return _channel


def enabled() -> bool:
    """Whether this worker runs under a soft-restart agent (else the API has no channel to read)."""
    return bool(os.environ.get(EVENTS_DIR_VARIABLE))


def get_worker_event() -> WorkerEvent:
    """The latest event from this worker's agent (``PAUSED`` until its first world is formed)."""
    event = _this_channel().latest()
    return event if event is not None else WorkerEvent(time.time(), WorkerState.PAUSED)


def current_world_version() -> int | None:
    """The world the process group made by :func:`reinitialize` belongs to; ``None`` before the first."""
    return _this_channel().version


def world_changed() -> bool:
    """Whether the agent has paused this worker's world or formed a newer one since :func:`reinitialize`.

    A training loop asks once per step and calls :func:`reinitialize` when it is true, so every
    member of a world leaves it at a step boundary (a peer that is still in a collective sees the
    group close and raises).
    """
    channel = _this_channel()
    event = channel.latest()
    if event is None:
        return channel.version is not None
    if event.worker_state is WorkerState.PAUSED:
        return True
    return event.worker_info is not None and event.worker_info.world_version != channel.version


def get_worker_info(timeout_s: float = DEFAULT_WAIT_S, *, newer_than: int | None = None) -> WorkerInfo:
    """This worker's place in the current world, waiting while the world is PAUSED.

    ``newer_than``: wait for a world after that version (the one a failed collective belonged to).
    Raises ``TimeoutError`` after ``timeout_s`` without such a world.
    """
    channel = _this_channel()
    deadline = time.monotonic() + timeout_s
    said_waiting = False
    while True:
        event = channel.latest()
        info = None if event is None else event.worker_info
        if (
            event is not None
            and event.worker_state is WorkerState.HEALTHY
            and info is not None
            and (newer_than is None or info.world_version > newer_than)
        ):
            return info
        if not said_waiting:
            channel.say_waiting()
            said_waiting = True
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no new world from the agent after {timeout_s:g} s (last event: "
                f"{'none' if event is None else event.worker_state.value})"
            )
        time.sleep(POLL_INTERVAL_S)


def is_peer_failure(error: BaseException, *, wait_s: float = PEER_FAILURE_WAIT_S) -> bool:
    """Whether ``error``, raised in a training step, came from the world changing under this worker
    (a peer failed or left, or the agent paused the world) rather than from this worker's own code.

    - the agent has paused this worker's world or formed a newer one (:func:`world_changed`): yes;
    - a ``torch.distributed.DistError`` (NCCL's ``DistBackendError``, a store or network error), or a
      text that is a peer's failure as gloo and NCCL word it (``rootcause_core.roles``: "connection
      closed by peer", a collective that timed out, "remote process exited", an aborted communicator): yes;
    - otherwise the agent is given ``wait_s`` to say the world changed (it learns of a peer's failure
      within its monitor interval): yes if it does, no if not: the error is the worker's own, and the
      loop should raise it (its node then restarts, or the job fails with it as the root cause).

    Outside a soft-restart task (no channel) only the exception itself decides.
    """
    import torch.distributed as dist

    from rootcause_core.roles import is_victim_message
    from rootcause_core.safe_text import exception_summary

    if enabled() and world_changed():
        return True
    text = exception_summary(error)  # "Type: text", even when the exception's __str__ raises
    if isinstance(error, dist.DistError) or is_victim_message(text):  # a collective timeout included
        return True
    if not enabled():
        return False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S)
        if world_changed():
            return True
    return False


def _socket_fds() -> set[int]:
    """This process's open sockets (Linux ``/proc``; empty where there is none)."""
    found = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                found.add(int(name))
        except OSError:
            continue
    return found


def _abort_gloo_transport(fds: set[int]) -> None:
    """Shut down the connections of a gloo group: gloo's own ``abort``/``destroy`` leave a peer that
    waits on this process blocked until the collective timeout (checked on torch 2.13: 20 s of a
    20 s timeout), while a shut-down connection makes it raise "connection closed" at once, so the
    whole old world leaves its collectives within moments. Listening sockets are left alone (gloo's
    listener thread aborts the process when its socket is shut down under it)."""
    for fd in fds:
        try:
            with socket.socket(fileno=os.dup(fd)) as connection:
                if not connection.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            continue  # closed meanwhile, or not a TCP socket


def _leave_transport(channel: _Channel) -> None:
    """Leave the transport of the current world's group, once per world (the caller holds
    ``channel.lock``): a collective blocked on it raises at once, here and in the peers waiting on
    this process. For NCCL, torch's communicator abort; for gloo, the group's connections shut down
    (:func:`_abort_gloo_transport`)."""
    import torch.distributed as dist

    if channel.version is not None and channel.interrupted_version == channel.version:
        return
    channel.interrupted_version = channel.version
    if dist.get_backend() == "nccl":
        from rootcause_engine.upstream.torch_worker import abort_process_groups

        abort_process_groups()
    else:
        _abort_gloo_transport(channel.transport_fds)


def _leave_process_group() -> None:
    """Leave the current default process group so that no peer stays blocked on this process:
    torch's destroy, whose wrapper (:func:`follow_process_groups`) leaves the transport first."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def follow_process_groups() -> None:
    """Have this worker's default process group, however it is made, left as :func:`reinitialize` leaves it.

    A loop written against the RFC's API alone makes each world's group with
    ``dist.init_process_group(backend, **get_worker_info().get_pg_parameters())`` and leaves it with
    ``dist.destroy_process_group()``. gloo's destroy does not release a peer blocked on this process
    (it waits out the collective timeout), and nothing would let a collective blocked on a frozen
    peer out at a scale-down. So both calls are wrapped, once per process (the agent's hook runs this
    in every soft-restart worker before the user's function): the init notes the sockets the group
    opened and the world it belongs to and starts the world watcher (:func:`_note_group`); the
    destroy of the default group first leaves its transport (:func:`_leave_group_transport`).
    """
    from rootcause_engine.upstream.torch_worker import wrap_default_group_lifecycle

    wrap_default_group_lifecycle(_note_group, _leave_group_transport)


def _note_group(init: Callable[[], None]) -> None:
    """Make the default group (``init``) and note its sockets and world for this worker's channel: the
    world is the one of the HEALTHY event the caller just read (a later event, read once the group is
    made, may already announce the next world)."""
    channel = _this_channel()
    joining = channel.latest()
    before = _socket_fds()
    init()
    with channel.lock:
        channel.transport_fds = _socket_fds() - before
        if joining is not None and joining.worker_state is WorkerState.HEALTHY and joining.worker_info is not None:
            channel.version, channel.group_since = joining.worker_info.world_version, joining.timestamp
    _ensure_world_watcher(channel)


def _leave_group_transport() -> None:
    """Before the default group is destroyed: leave its transport (NCCL's abort destroys it too)."""
    import torch.distributed as dist

    if dist.is_initialized():
        channel = _this_channel()
        with channel.lock:
            _leave_transport(channel)
            channel.transport_fds = set()


def _interrupt_if_scaled_down(channel: _Channel) -> None:
    """Leave the current world's transport from the world watcher's thread when a scale-down ends its
    world: a collective the training thread is blocked in raises now. For a peer that froze (a lost
    node closes no socket) it would otherwise wait out the collective timeout, never seeing the
    agent's PAUSED. Decided and done under the channel's lock, on the latest event read there: the
    training thread may meanwhile have made the next world's group, and an event read before that
    (a loaded machine can hold the watcher between its look and its act) would end the new group
    in place of the old one, its peers failing in their ``init_process_group``."""
    import torch.distributed as dist

    with channel.lock:
        if channel.version is None or not dist.is_initialized():
            return
        if _scaled_down_since_the_group(channel, channel.latest()):
            _leave_transport(channel)


def _scaled_down_since_the_group(channel: _Channel, event: WorkerEvent | None) -> bool:
    """Whether ``event`` (the latest) is a scale-down that ends the current group's world: a PAUSED
    announced after that world's HEALTHY, or the next world already HEALTHY."""
    if event is None or event.change_event is not WorldChangeEvent.SCALE_DOWN:
        return False
    if event.worker_state is WorkerState.PAUSED:
        return channel.group_since is None or event.timestamp > channel.group_since
    version = channel.version
    return event.worker_info is not None and version is not None and event.worker_info.world_version > version


#: The world watcher's looks (one that raises is logged, the watch goes on) and its thread's death.
_world_looks = LoopGuard(
    "world watcher", stopped="a scale-down no longer let a collective blocked on a lost node out at once")
#: The world watcher's duty on this worker's watch thread, once the first group was made.
_world_duty: list[Duty] = []


def _ensure_world_watcher(channel: _Channel) -> None:
    """The world watcher, on this worker's watch thread (:func:`~rootcause_engine.thread_guard.worker_watch`,
    shared with the progress beacon): every :data:`WATCH_INTERVAL_S`, a scale-down (a node left, or the
    peer watch found one lost) pauses the world, and a worker blocked in a collective with the node that
    is gone is let out of it at once (:func:`_interrupt_if_scaled_down`).

    The PAUSED may already be followed by the smaller world's HEALTHY when the watcher looks (the
    agents agree on it within milliseconds): a scale-down to a world newer than the group's ends the
    group's collectives just the same. A look that raises costs that look only, logged once per kind of
    error (:data:`_world_looks`): the watcher must never hurt the worker (the collective timeout still
    bounds a blocked one), nor fail in silence. A thread that died (logged at critical level) is
    started again here, at the next world's group: its duty outlives the death."""
    watch = worker_watch()
    if not _world_duty:
        _world_duty.append(watch.every(WATCH_INTERVAL_S, lambda: _interrupt_if_scaled_down(channel),
                                       guard=_world_looks))
    watch.ensure_running()


def reinitialize(
    backend: str | None = None, *, timeout: timedelta | None = None, wait_timeout_s: float = DEFAULT_WAIT_S
) -> WorkerInfo:
    """Leave the current process group, wait for the next HEALTHY world, and join its process group.

    The first call (no group yet) waits for the first world. ``backend`` defaults to
    :func:`rootcause_engine.distributed.default_backend` (NCCL where CUDA is, else gloo); ``timeout``
    is the new group's collective timeout.
    """
    import torch.distributed as dist

    from rootcause_engine.distributed import default_backend

    channel = _this_channel()
    follow_process_groups()
    _leave_process_group()
    info = get_worker_info(wait_timeout_s, newer_than=channel.version)
    dist.init_process_group(backend or default_backend(), **info.get_pg_parameters(timeout))
    with channel.lock:
        channel.version = info.world_version  # the world asked for, should a newer event have come meanwhile
    return info
