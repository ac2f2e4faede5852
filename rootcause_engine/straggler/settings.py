"""``StragglerCheck``: what the straggler pre-check measures, how it judges, and what it does.

The settings are plain values (no torch objects) so they travel unchanged inside a task config,
through cloudpickle into every worker, and into the report that says which thresholds were used.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What every worker does once the verdicts are known (the same on all workers)."""

    #: Log the report and start training anyway.
    WARN = "warn"
    #: Raise one non-recoverable error naming the slow nodes, before the user's function runs.
    FAIL = "fail"
    #: Make the slow pods leave so the others re-rendezvous without them (needs an ``nnodes`` range).
    EXCLUDE = "exclude"


@dataclass(frozen=True)
class Workload:
    """An explicit benchmark size, the same on every worker (a per-node size would hide slowness).

    Args:
        matmul_size: side of the square matrices multiplied in the compute step.
        matmuls_per_trial: matrix products timed together as one trial.
        allreduce_numel: elements of the tensor all-reduced in the communication step.
        allreduces_per_trial: all-reduces timed together as one trial.
        trials: timed trials per step and round; a node must be slow in most of them (``decision.py``).
    """

    matmul_size: int
    matmuls_per_trial: int
    allreduce_numel: int
    allreduces_per_trial: int
    trials: int = 5

    def __post_init__(self) -> None:
        for name in ("matmul_size", "matmuls_per_trial", "allreduce_numel", "allreduces_per_trial", "trials"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Workload.{name} must be a positive integer, got {value!r}")


#: Sizes picked when ``workload="auto"``. CPU: a product of two 256x256 fp32 matrices takes ~0.4 ms
#: of one core, so a trial of 48 is ~18 ms of CPU time (longer in wall time where nodes share
#: cores): long against the scheduler's time slice and timer resolution, so a trial measures the
#: device rather than one scheduling decision; 5 trials per round keep a 6-node check on a shared
#: 2-core machine at about 2 s. 4 all-reduces of 256 KiB per communication trial likewise.
#: CUDA: 8192x8192 bf16 keeps an H100 busy ~1.5 ms per product, 10 per trial; 32 Mi bf16 elements
#: (64 MiB) per all-reduce is in NCCL's bandwidth-bound regime.
AUTO_WORKLOADS: dict[str, Workload] = {
    "cpu": Workload(matmul_size=256, matmuls_per_trial=48, allreduce_numel=1 << 16, allreduces_per_trial=4),
    "cuda": Workload(matmul_size=8192, matmuls_per_trial=10, allreduce_numel=1 << 25, allreduces_per_trial=4),
}


@dataclass(frozen=True)
class StragglerCheck:
    """Settings of the straggler pre-check (DLRover-style paired benchmarks, run before training).

    Args:
        threshold: a node is slow when, in every round, its trials take more than ``threshold`` times
            the median of the *other* nodes' same trials (the median over its trials; see
            ``decision.py``). Raised automatically where the measured noise would reach it.
        network_threshold: the same ratio for communication times. Higher than ``threshold`` by
            default because link times vary more than device times even when nothing is broken
            (a shared fabric, other jobs' traffic, and on a busy host the CPU time a loopback
            transfer waits for), while the faults worth stopping for (a link trained down to half
            its speed, a flapping port) cost a factor of 2 or more. Lower it on a quiet fabric.
        min_excess_s: and its median trial exceeds the reference by at least this many seconds, so
            the jitter of a tiny explicit workload is never called a straggler.
        rounds: benchmark rounds; round 1 pairs nodes in rank order, each later round pairs the
            fastest with the slowest so far. Two rounds localize a slow link (needs >= 4 nodes).
        workload: ``"auto"`` (sized to the device) or an explicit ``Workload``.
        timeout_s: bound on the check's collectives; a step that takes longer marks its node failed.
        action: ``"warn"``, ``"fail"`` or ``"exclude"`` (see ``Action``).
        min_nodes: run the check only with at least this many nodes; with fewer, there is nothing to
            compare a node against, and the check is skipped (the report says so).
    """

    threshold: float = 1.3
    network_threshold: float = 2.0
    min_excess_s: float = 0.001
    rounds: int = 2
    workload: Workload | str = "auto"
    timeout_s: float = 300.0
    action: Action | str = Action.WARN
    min_nodes: int = 2

    def __post_init__(self) -> None:
        if not self.threshold > 1.0:
            raise ValueError(f"StragglerCheck.threshold must be > 1.0 (a ratio to the median), got {self.threshold!r}")
        if not self.network_threshold > 1.0:
            raise ValueError(f"StragglerCheck.network_threshold must be > 1.0, got {self.network_threshold!r}")
        if self.min_excess_s < 0:
            raise ValueError(f"StragglerCheck.min_excess_s must be >= 0 seconds, got {self.min_excess_s!r}")
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"StragglerCheck.rounds must be a positive integer, got {self.rounds!r}")
        if not (isinstance(self.workload, Workload) or self.workload == "auto"):
            raise ValueError(f"StragglerCheck.workload must be 'auto' or a Workload(...), got {self.workload!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"StragglerCheck.timeout_s must be > 0 seconds, got {self.timeout_s!r}")
        try:
            object.__setattr__(self, "action", Action(self.action))
        except ValueError:
            choices = ", ".join(repr(a.value) for a in Action)
            raise ValueError(f"StragglerCheck.action must be one of {choices}, got {self.action!r}") from None
        if not isinstance(self.min_nodes, int) or self.min_nodes < 2:
            raise ValueError(f"StragglerCheck.min_nodes must be an integer >= 2, got {self.min_nodes!r}")

    def workload_for(self, device_type: str) -> Workload:
        """The workload to run on ``device_type`` (``"cpu"`` or ``"cuda"``)."""
        if isinstance(self.workload, Workload):
            return self.workload
        return AUTO_WORKLOADS["cuda" if device_type == "cuda" else "cpu"]


class StragglerConfigError(ValueError):
    """The straggler check cannot work with this task's configuration (raised before anything runs)."""


class StragglerCheckError(RuntimeError):
    """The check itself could not run (e.g. a collective timed out); says where and what to do."""


def parse_nnodes(nnodes: int | str) -> tuple[int, int]:
    """``nnodes`` as kfpytorch accepts it (``4`` or ``"3:4"``) -> ``(min_nodes, max_nodes)``."""
    text = str(nnodes).strip()
    low, sep, high = text.partition(":")
    try:
        lo = int(low)
        hi = int(high) if sep else lo
    except ValueError:
        raise StragglerConfigError(f"nnodes must be an integer or a range 'min:max', got {nnodes!r}") from None
    if lo < 1 or hi < lo:
        raise StragglerConfigError(f"nnodes range must satisfy 1 <= min <= max, got {nnodes!r}")
    return lo, hi


def validate_for_task(check: StragglerCheck, nnodes: int | str, max_restarts: int) -> None:
    """Refuse, before launch, a check whose action cannot work with the task's ``nnodes``.

    ``exclude`` drops the slow pods and lets the rest re-rendezvous: that needs a node range (the
    job must be allowed to shrink) and at least one agent restart (the re-rendezvous is a restart).
    """
    if not isinstance(check, StragglerCheck):
        raise StragglerConfigError(f"straggler_check must be a StragglerCheck(...), got {type(check).__name__}")
    low, high = parse_nnodes(nnodes)
    if check.action is Action.EXCLUDE:
        if low == high:
            raise StragglerConfigError(
                f"StragglerCheck(action='exclude') needs nnodes as a range 'min:max' so the job can go on "
                f"without the slow nodes; nnodes={nnodes!r} is fixed. Use e.g. nnodes='{max(1, high - 1)}:{high}', "
                "or action='fail' / 'warn'."
            )
        if max_restarts < 1:
            raise StragglerConfigError(
                "StragglerCheck(action='exclude') re-forms the job without the slow nodes through one restart "
                f"of the worker group; set max_restarts >= 1 (it is {max_restarts})."
            )
