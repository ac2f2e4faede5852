"""The two micro-benchmarks a worker runs each round: compute (local) and communication (in-group).
They are timed apart because they localize differently. A slow GPU or CPU shows on its own node. A
slow link shows only when the pairings of two rounds are compared. Each step runs the same fixed
workload on every worker and returns every trial's time, so no single trial decides. On CPU a
trial's time is CPU time, not wall time, so waiting for a shared core is not taken for slowness.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rootcause_engine.distributed import default_backend, default_device
from rootcause_engine.straggler.settings import Workload

#: Runs one compute trial (the callable it is given) and returns when it is done. The default just
#: calls it; a harness can wrap it, e.g. ``simulate.py`` makes a simulated node's device slower
#: without touching the measurement.
TrialRunner = Callable[[Callable[[], None]], None]


def run_trial(trial: Callable[[], None]) -> None:
    """The default ``TrialRunner``: run the trial as it is."""
    trial()


class StepTimeout(RuntimeError):
    """A benchmark step ran past its share of ``StragglerCheck.timeout_s``."""


@dataclass(frozen=True)
class DeviceChoice:
    """Where the check runs and with what: CUDA + NCCL + bf16 where possible, else CPU + gloo + fp32."""

    device: torch.device
    backend: str
    dtype: torch.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def choose_device(local_rank: int) -> DeviceChoice:
    """CUDA (this worker's GPU, NCCL, bf16 where the GPU supports it, else fp16) or CPU (gloo, fp32);
    the backend and device are the engine's one choice (:mod:`rootcause_engine.distributed`).

    fp32 on CPU because CPU bf16 matmul is emulated on many CPUs and would measure the emulation.
    """
    backend = default_backend()
    device = default_device(local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return DeviceChoice(device, backend, dtype)
    return DeviceChoice(device, backend, torch.float32)


def trial_clock(device: torch.device) -> Callable[[], float]:
    """What a compute trial is timed with (see the module doc): wall time on CUDA, CPU time on CPU."""
    return time.perf_counter if device.type == "cuda" else time.process_time


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_compute(
    workload: Workload,
    choice: DeviceChoice,
    budget_s: float,
    line_up: Callable[[], None],
    runner: TrialRunner = run_trial,
) -> tuple[float, ...]:
    """Times (``trial_clock``) of ``trials`` trials of ``matmuls_per_trial`` square matrix products.

    ``line_up`` (a barrier over the whole job) starts every trial, the warm-up included. It is
    called ``trials + 1`` times whatever happens, so that every worker runs the same collectives:
    a worker whose device raised or ran past ``budget_s`` skips the remaining work but still lines
    up, and raises (``StepTimeout`` or the device's error) only after the last trial.
    """
    n = workload.matmul_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen, dtype=torch.float32).to(choice.device, choice.dtype)
    b = torch.randn(n, n, generator=gen, dtype=torch.float32).to(choice.device, choice.dtype)
    out = torch.empty_like(a)

    def trial() -> None:
        for _ in range(workload.matmuls_per_trial):
            torch.matmul(a, b, out=out)
        _sync(choice.device)

    clock = trial_clock(choice.device)
    started = time.perf_counter()
    times: list[float] = []
    failure: Exception | None = None
    for index in range(workload.trials + 1):  # trial 0 warms up (kernel choice, allocator, caches, clocks)
        line_up()
        if failure is not None:
            continue
        t0 = clock()
        try:
            runner(trial)
        except Exception as exc:  # reported once every trial has lined up
            failure = exc
            continue
        if index:
            times.append(clock() - t0)
        if time.perf_counter() - started > budget_s:
            failure = StepTimeout(f"compute step took over {budget_s:.1f} s ({len(times)}/{workload.trials} trials)")
    if failure is not None:
        raise failure
    return tuple(times)


def measure_comm(workload: Workload, choice: DeviceChoice, group: dist.ProcessGroup) -> tuple[float, ...]:
    """Wall times of ``trials`` trials of ``allreduces_per_trial`` all-reduces within ``group``.

    Each trial starts together: a one-element all-reduce lines the group up first, so a partner that
    arrives late (say, from a slow compute step) is not billed as a slow link. No per-step deadline
    here: members must agree on how many collectives they run, so the group's own timeout (the
    check's ``timeout_s``) bounds a hung link instead.
    """
    payload = torch.ones(workload.allreduce_numel, dtype=choice.dtype, device=choice.device)
    token = torch.zeros(1, dtype=torch.float32, device=choice.device)
    times = []
    for trial in range(workload.trials + 1):  # trial 0 warms up (connections, NCCL communicator)
        dist.all_reduce(token, group=group)
        _sync(choice.device)
        t0 = time.perf_counter()
        for _ in range(workload.allreduces_per_trial):
            dist.all_reduce(payload, group=group)
        _sync(choice.device)
        if trial:
            times.append(time.perf_counter() - t0)
    return tuple(times)
