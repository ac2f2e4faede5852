"""The two micro-benchmarks a worker runs each round: compute (local) and communication (in-group).

They are timed separately because they localize differently: compute is local, so a slow GPU/CPU
shows on its own node; communication is shared by the group, so only the pairings of two rounds
tell which node's link is slow.

Each step runs a fixed workload (the same on every worker, or a slow node would simply get less
work) as several timed trials after one untimed warm-up trial, and reports the **fastest** trial.
Noise only ever adds time (a trial cannot run faster than the device or the link allows), so the
fastest trial is the best estimate of what the hardware can do: preemption, a page fault or a
neighbour's burst in some trials does not count, while a persistent slowdown (a throttled GPU, a
link trained down, a CPU quota) raises every trial, the fastest included. The price: a device that
is slow only now and then (in a minority of trials) is not caught by a check this short.

Trials are kept short on CPU (under a millisecond) so that on a busy host some trials run
unpreempted. A time-sharing slowdown that should count on CPU (a CPU-hog neighbour, a cgroup quota)
then needs trials longer than the scheduler slice or quota period: use an explicit ``Workload``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from flytekitplugins_rootcause.straggler.settings import Workload

#: TEST AND BENCHMARK ONLY: a factor > 1 makes this process's compute step genuinely slower in
#: wall-clock time (it sleeps ``(factor - 1) x`` the time each trial took), simulating a slow node
#: deterministically on a machine with too few cores for real per-node hardware. Nothing in the
#: plugin sets it; only ``set_test_only_compute_slowdown`` (called by the simulation harness) does.
_TEST_ONLY_COMPUTE_SLOWDOWN = 1.0


def set_test_only_compute_slowdown(factor: float) -> None:
    """TEST AND BENCHMARK ONLY: slow this process's compute step down by ``factor`` (>= 1)."""
    global _TEST_ONLY_COMPUTE_SLOWDOWN
    if factor < 1.0:
        raise ValueError(f"a slowdown factor must be >= 1, got {factor!r}")
    _TEST_ONLY_COMPUTE_SLOWDOWN = factor


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
    """CUDA (this worker's GPU, NCCL, bf16 where the GPU supports it, else fp16) or CPU (gloo, fp32).

    fp32 on CPU because CPU bf16 matmul is emulated on many CPUs and would measure the emulation.
    """
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return DeviceChoice(device, "nccl", dtype)
    return DeviceChoice(torch.device("cpu"), "gloo", torch.float32)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_compute(workload: Workload, choice: DeviceChoice, budget_s: float) -> float:
    """Fastest wall time of ``trials`` trials of ``matmuls_per_trial`` square matrix products."""
    n = workload.matmul_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen, dtype=torch.float32).to(choice.device, choice.dtype)
    b = torch.randn(n, n, generator=gen, dtype=torch.float32).to(choice.device, choice.dtype)
    out = torch.empty_like(a)
    started = time.perf_counter()
    trials = []
    for trial in range(workload.trials + 1):  # trial 0 warms up (kernel choice, allocator, caches, clocks)
        t0 = time.perf_counter()
        for _ in range(workload.matmuls_per_trial):
            torch.matmul(a, b, out=out)
        _sync(choice.device)
        elapsed = time.perf_counter() - t0
        if _TEST_ONLY_COMPUTE_SLOWDOWN > 1.0:
            time.sleep((_TEST_ONLY_COMPUTE_SLOWDOWN - 1.0) * elapsed)
            elapsed = time.perf_counter() - t0
        if trial:
            trials.append(elapsed)
        if time.perf_counter() - started > budget_s:
            raise StepTimeout(f"compute step took over {budget_s:.1f} s ({len(trials)}/{workload.trials} trials)")
    return min(trials)


def measure_comm(workload: Workload, choice: DeviceChoice, group: dist.ProcessGroup) -> float:
    """Fastest wall time of ``trials`` trials of ``allreduces_per_trial`` all-reduces within ``group``.

    Each trial starts together: a one-element all-reduce lines the group up first, so a partner that
    arrives late (say, from a slow compute step) is not billed as a slow link. No per-step deadline
    here: members must agree on how many collectives they run, so the group's own timeout (the
    check's ``timeout_s``) bounds a hung link instead.
    """
    payload = torch.ones(workload.allreduce_numel, dtype=choice.dtype, device=choice.device)
    token = torch.zeros(1, dtype=torch.float32, device=choice.device)
    trials = []
    for trial in range(workload.trials + 1):  # trial 0 warms up (connections, NCCL communicator)
        dist.all_reduce(token, group=group)
        _sync(choice.device)
        t0 = time.perf_counter()
        for _ in range(workload.allreduces_per_trial):
            dist.all_reduce(payload, group=group)
        _sync(choice.device)
        if trial:
            trials.append(time.perf_counter() - t0)
    return min(trials)
