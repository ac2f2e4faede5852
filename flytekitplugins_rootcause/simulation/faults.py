"""Faults the simulator injects into one global rank, passed to the pods in one variable.

The training task (``simulation.training``) calls :func:`maybe_inject` once per step; the worker the
fault names (pod name and local rank: the global rank a pod gets is decided by the rendezvous)
then raises, dies by SIGKILL or SIGABRT, or hangs. ``ordering`` makes a worker on another pod
raise its own, independent error ``second_delay_s`` after the first: the earlier one is the root
cause even though both happen within the same wall-clock second. ``clock_offset_s`` runs the faulty
pod's wall clock that far ahead of the others' (``skewed_clock/sitecustomize.py``), as on a node
whose clock is off: its failure then *looks* later than its victims' to anyone comparing stamps.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import signal
import time
from pathlib import Path

FAULT_VARIABLE = "ROOTCAUSE_SIM_FAULT"
SIM_DIR_VARIABLE = "ROOTCAUSE_SIM_DIR"
FAULT_TIME_FILE = "fault_time_ns"
#: Set in the skewed pod only: how far its wall clock runs ahead, in ns (read by ``sitecustomize``).
CLOCK_OFFSET_VARIABLE = "ROOTCAUSE_SIM_CLOCK_OFFSET_NS"
#: ORDERING: where the first failing worker will record its error (the second waits for that file).
FIRST_ERROR_FILE = "first_error_file"


class FaultKind(enum.StrEnum):
    RAISE = "raise"
    SIGKILL = "sigkill"
    SIGABRT = "sigabrt"
    HANG = "hang"
    ORDERING = "ordering"


@dataclasses.dataclass(frozen=True)
class Fault:
    """``kind`` injected into worker ``local_rank`` of pod ``pod`` at training step ``step``."""

    kind: FaultKind
    pod: str
    local_rank: int = 0
    step: int = 3
    second_pod: str | None = None  # ORDERING only: where the later, independent failure happens
    second_local_rank: int = 0
    second_delay_s: float = 0.05
    clock_offset_s: float = 0.0  # how far the faulty pod's wall clock runs ahead of the others'

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_env(cls, value: str | None) -> Fault | None:
        if not value:
            return None
        data = json.loads(value)
        data["kind"] = FaultKind(data["kind"])
        return cls(**data)


def _sim_dir() -> Path:
    return Path(os.environ[SIM_DIR_VARIABLE])


def record_fault_time(path: Path) -> None:
    """Ground truth for the simulator: when the fault happened (written before it happens), on the
    machine's clock (a skewed pod's offset taken back out)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(time.time_ns() - int(os.environ.get(CLOCK_OFFSET_VARIABLE) or 0)))
    tmp.replace(path)


def maybe_inject(step: int, pod: str, local_rank: int) -> None:
    """Inject the configured fault if this worker and step are due."""
    fault = Fault.from_env(os.environ.get(FAULT_VARIABLE))
    if fault is None or step != fault.step:
        return
    fault_file = _sim_dir() / FAULT_TIME_FILE
    first_error_pointer = _sim_dir() / FIRST_ERROR_FILE
    if (pod, local_rank) == (fault.pod, fault.local_rank):
        if fault.kind == FaultKind.ORDERING:
            first_error_pointer.write_text(os.environ.get("TORCHELASTIC_ERROR_FILE", ""))
        record_fault_time(fault_file)
        if fault.kind in (FaultKind.RAISE, FaultKind.ORDERING):
            raise RuntimeError(f"injected failure on {pod} local rank {local_rank} at step {step}")
        if fault.kind == FaultKind.SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.kind == FaultKind.SIGABRT:
            os.abort()
        if fault.kind == FaultKind.HANG:
            while True:
                time.sleep(3600)
    if fault.kind == FaultKind.ORDERING and (pod, local_rank) == (fault.second_pod, fault.second_local_rank):
        # off any collective, so this is an independent failure, not a victim of the first one;
        # timed from the first worker's *recorded* error (its error file, written complete), so a
        # first worker descheduled between its fault and its record cannot swap the order
        deadline = time.monotonic() + 60
        while not first_error_pointer.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        first_error = first_error_pointer.read_text() if first_error_pointer.exists() else ""
        while first_error and not os.path.exists(first_error) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(fault.second_delay_s)
        raise RuntimeError(f"independent later failure on {pod} local rank {local_rank} at step {step}")
