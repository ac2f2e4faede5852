"""The training loop written for soft restarts (``restart_policy="soft"``), with an injectable failure.

Front-end-free (both flavours' simulated tasks run it): the exceptions a worker raises for its
injected failure are the caller's, since what asks for a retry differs (flytekit's
``FlyteRecoverableException``; on Flyte 2 anything but ``NonRecoverableError``).

The loop is the pattern of :mod:`rootcause_engine.soft_restart`: initialise once (a deliberate
``init_s`` stands in for loading the model), take the process group from ``reinitialize``, and on
a failed collective or a paused world take the next one and agree on the latest step. Each step
all-reduces ``step + 1`` and adds the mean, so the result is ``steps * (steps + 1) / 2`` on every
world size: a step lost or counted twice shows in the result.

Every worker appends what it did to ``<sim dir>/soft/<pod>-<local rank>-<pid>.jsonl`` (``start``,
``world`` with the change that led to it, ``step``), the ground truth for tests and the benchmark.
With ``init_until_scale_down``, a restarted worker's initialisation lasts until a survivor has
logged the scale-down world: a model load that outlasts the survivors' rendezvous (the usual case),
without a timing a busy machine could break.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from rootcause_core.worker_names import current_worker_name
from rootcause_engine import soft_restart
from rootcause_harness.faults import SIM_DIR_VARIABLE, ask_for_preemption, freeze_pod, is_faulty_pod, vanish_pod

#: Makes the exception a worker raises for its injected failure, from the message.
ErrorFactory = Callable[[str], BaseException]

SOFT_LOG_DIR = "soft"
#: Collective timeout of the soft-restart tasks' groups: a failure surfaces as a transport error at
#: once; this only bounds a hang.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


class _Log:
    def __init__(self, pod: str, local_rank: int) -> None:
        sim_dir = os.environ.get(SIM_DIR_VARIABLE)
        self.path = None
        if sim_dir:
            directory = Path(sim_dir) / SOFT_LOG_DIR
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / f"{pod}-{local_rank}-{os.getpid()}.jsonl"

    def write(self, event: str, **fields: object) -> None:
        if self.path is not None:
            with open(self.path, "a") as handle:
                handle.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}) + "\n")


def _agree(step: int, total: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The new world takes the state of its lowest rank that has the latest step (a restarted worker
    has step 0; survivors of a failed step may be one apart)."""
    latest = torch.tensor([step])
    dist.all_reduce(latest, op=dist.ReduceOp.MAX)
    holder = torch.tensor([dist.get_rank() if step == int(latest) else dist.get_world_size()])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    dist.broadcast(total, src=int(holder))
    return int(latest), total


def _until_a_survivor_scaled_down(timeout_s: float = 120.0) -> None:
    directory = Path(os.environ.get(SIM_DIR_VARIABLE, ".")) / SOFT_LOG_DIR
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any('"change": "SCALE_DOWN"' in path.read_text() for path in directory.glob("*.jsonl")):
            return
        time.sleep(0.02)


class _Worlds(Protocol):
    def enter(self) -> soft_restart.WorkerInfo: ...
    def changed(self) -> bool: ...
    def is_peer_failure(self, error: BaseException) -> bool: ...


class _HelperWorlds:
    """The loop of ``docs/soft_restarts.md``: the plugin's helpers on top of the RFC's API."""

    def enter(self) -> soft_restart.WorkerInfo:
        return soft_restart.reinitialize("gloo", timeout=COLLECTIVE_TIMEOUT)

    def changed(self) -> bool:
        return soft_restart.world_changed()

    def is_peer_failure(self, error: BaseException) -> bool:
        return soft_restart.is_peer_failure(error)


class _RfcWorlds:
    """The loop of ``docs/soft_restarts.md``'s "The RFC's API alone": ``get_worker_event``,
    ``get_worker_info``, ``WorkerInfo.get_pg_parameters`` and torch's own init and destroy, nothing else."""

    #: how long a failed collective waits for the agent's word before the error counts as this worker's
    #: own: the group's collective timeout (a lost pod's word comes after the peer watch's verdict)
    PEER_FAILURE_WAIT_S = COLLECTIVE_TIMEOUT.total_seconds()

    def __init__(self) -> None:
        self.joined_at: float | None = None  # the timestamp of the event whose world this process's group is

    def enter(self) -> soft_restart.WorkerInfo:
        if dist.is_initialized():
            dist.destroy_process_group()
        info = soft_restart.get_worker_info()  # waits while PAUSED; tells the agent this worker is ready
        self.joined_at = soft_restart.get_worker_event().timestamp
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT, **info.get_pg_parameters())
        return info

    def changed(self) -> bool:
        return soft_restart.get_worker_event().timestamp != self.joined_at

    def is_peer_failure(self, error: BaseException) -> bool:
        deadline = time.monotonic() + self.PEER_FAILURE_WAIT_S
        while time.monotonic() < deadline:
            if self.changed():
                return True
            time.sleep(0.01)
        return False


#: ``loop`` values: how a worker follows the world.
_LOOPS: dict[str, type[_HelperWorlds] | type[_RfcWorlds]] = {"helpers": _HelperWorlds, "rfc": _RfcWorlds}


#: ``fail_kind`` values: the worker raises (recoverable unless ``fail_fatal``), or its whole pod is lost at
#: once: every process SIGKILLed (``vanish``) or SIGSTOPped (``freeze``), as a lost node is, or its
#: kubelet stops it (``preempt``: SIGTERM to the pod's main process, SIGKILL after the grace) while
#: the worker goes on training.
FAIL_KINDS = ("raise", "vanish", "freeze", "preempt")


def run_soft_training(
    steps: int, init_s: float, step_s: float, fail_pod: str, fail_local_rank: int, fail_step: int, fail_again: bool,
    init_until_scale_down: bool = False, fail_fatal: bool = False, fail_kind: str = "raise",
    finish_after_scale_up: bool = False, loop: str = "helpers", restart_init_s: float = 0.0, *,
    recoverable_error: ErrorFactory, fatal_error: ErrorFactory,
) -> float:
    """Train ``steps`` steps; the worker ``fail_local_rank`` of ``fail_pod`` fails at ``fail_step``.

    ``recoverable_error`` / ``fatal_error``: the front-end's exceptions for a failure that a retry
    (and so a soft restart) may heal, and for one it may not (``fail_fatal``).
    """
    if fail_kind not in FAIL_KINDS:
        raise ValueError(f"fail_kind must be one of {FAIL_KINDS}, got {fail_kind!r}")
    if loop not in _LOOPS:
        raise ValueError(f"loop must be one of {sorted(_LOOPS)}, got {loop!r}")
    pod, local_rank = current_worker_name(), int(os.environ["LOCAL_RANK"])
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    log = _Log(pod, local_rank)
    log.write("start", restarted=restarted)
    time.sleep(init_s + (restart_init_s if restarted else 0.0))  # the model load: done before waiting for a world
    if restarted and init_until_scale_down:
        _until_a_survivor_scaled_down()
    soft = soft_restart.enabled()
    worlds = _LOOPS[loop]()
    if soft:
        info = worlds.enter()
        version = info.world_version
    else:  # torch's hard restarts: a failure restarts this process, from step 0
        dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
        version = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    step, total = 0, torch.zeros(4)
    step, total = _agree(step, total)
    log.write("world", version=version, rank=dist.get_rank(), world_size=dist.get_world_size(), change=None,
              step=step)
    changes: list[str] = []  # the world changes this process went through
    while step < steps:
        if soft and worlds.changed():
            info, step, total = _next_world(worlds, log, step, total)
            version = info.world_version
            changes.append(_last_change())
            continue
        if finish_after_scale_up and step == steps - 1 and changes[-1:] == ["SCALE_DOWN"]:
            # a survivor holds its last step until the pod that left (restarted, or rescheduled after
            # it was lost) joined again, so the training cannot end before the scale-up, however
            # slowly that pod's spawned workers start
            time.sleep(0.05)
            continue
        # the fault: at ``fail_step``; with ``fail_again``, a restarted worker fails again at its first step;
        # recoverable unless ``fail_fatal``, by the front-end's exceptions
        due = step == fail_step if not restarted else fail_again
        if local_rank == fail_local_rank and due and fail_pod and is_faulty_pod(fail_pod, pod):
            log.write("fault", step=step, kind=fail_kind)
            if fail_kind == "vanish":
                vanish_pod(pod)
            if fail_kind == "freeze":
                freeze_pod(pod)
            if fail_kind == "preempt":  # the worker trains on until its agent ends it
                ask_for_preemption(pod, signals=1)
            else:
                message = f"injected failure at step {step} on {pod} local rank {local_rank}"
                raise fatal_error(message) if fail_fatal else recoverable_error(message)
        contribution = torch.full((4,), float(step + 1))
        try:
            dist.all_reduce(contribution)
        except Exception as error:  # a peer failed: gloo raises a plain RuntimeError, NCCL a DistBackendError
            log.write("collective_failed", step=step, error=str(error)[:200])
            if not soft or not worlds.is_peer_failure(error):
                raise
            info, step, total = _next_world(worlds, log, step, total)
            version = info.world_version
            changes.append(_last_change())
            continue
        total += contribution / dist.get_world_size()
        step += 1
        log.write("step", step=step, version=version, rank=dist.get_rank(), world_size=dist.get_world_size())
        time.sleep(step_s)
    dist.destroy_process_group()
    return float(total.mean())


def _last_change() -> str:
    change = soft_restart.get_worker_event().change_event
    return "" if change is None else change.value


def _next_world(worlds: _Worlds, log: _Log, step: int, total: torch.Tensor) -> tuple[soft_restart.WorkerInfo, int,
                                                                                  torch.Tensor]:
    """The next world, agreed on the step: the agreement's collectives may meet a world change too (a
    peer failing, or leaving for a scale-up, while this worker still syncs), which means the next one."""
    while True:
        info = worlds.enter()
        try:
            step, total = _agree(step, total)
            break
        except Exception as error:
            log.write("collective_failed", step=step, error=str(error)[:200])
            if not worlds.is_peer_failure(error):
                raise
    log.write("world", version=info.world_version, rank=info.rank, world_size=info.world_size,
              change=_last_change() or None, step=step)
    return info, step, total


def read_worker_logs(sim_dir: Path) -> dict[tuple[str, int], list[list[dict[str, object]]]]:
    """What every worker process of a job logged: (pod, local rank) -> one event list per process, in start order."""
    processes: dict[tuple[str, int], list[list[dict[str, object]]]] = {}
    directory = Path(sim_dir) / SOFT_LOG_DIR
    for path in directory.glob("*.jsonl") if directory.exists() else ():
        pod, local_rank, _pid = path.stem.rsplit("-", 2)
        events = [json.loads(line) for line in path.read_text().splitlines() if line]
        processes.setdefault((pod, int(local_rank)), []).append(events)
    for runs in processes.values():
        runs.sort(key=lambda events: float(events[0]["t"]))  # type: ignore[arg-type]
    return processes


def steps_of(events: list[dict[str, Any]]) -> list[int]:
    """The steps one worker process took, in order, from its events (:func:`read_worker_logs`).

    A soft restart keeps the survivors' processes, and a restarted one resumes after the steps its
    world agreed on. These numbers show a step lost or taken twice.
    """
    return [int(event["step"]) for event in events if event["event"] == "step"]


def followed_steps(events: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Every step one worker process went through, in order, and those of them it did not take
    itself but caught up on as it entered a world: the survivors of a failed step may be one apart
    (a peer that stops in the middle of an all-reduce, as a preempted pod's worker does, may let one
    survivor finish the step and not another), and the new world's agreement (``_agree``) takes the
    one behind to the latest step."""
    followed: list[int] = []
    caught_up: list[int] = []
    for event in events:
        if event["event"] == "step":
            followed.append(int(event["step"]))
        elif event["event"] == "world" and followed and int(event["step"]) > followed[-1]:
            behind = range(followed[-1] + 1, int(event["step"]) + 1)
            followed.extend(behind)
            caught_up.extend(behind)
    return followed, caught_up


def assert_every_step_once(events: list[dict[str, Any]], steps: int) -> None:
    """A survivor's process went through every step once and in order, through every world change:
    taken, or caught up on at a change (:func:`followed_steps`: one step at most, a peer's)."""
    followed, caught_up = followed_steps(events)
    assert len(caught_up) <= 1, f"caught up on {caught_up}: steps lost at a world change"
    assert followed == list(range(1, steps + 1)), (steps_of(events), caught_up)


def changes_of(events: list[dict[str, Any]]) -> list[str | None]:
    """The change that led to each world one worker process joined, in order (``None`` where none did, as
    for the first world).

    A survivor's worker must hear of every scale-down and scale-up, once each and in order. This list is
    what it heard.
    """
    return [event["change"] for event in events if event["event"] == "world"]
