"""The compute step's contract with the rest of the check: every worker lines up for every trial
(even when its device fails), and a harness changes what a trial costs only through the runner."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from rootcause_engine.straggler.measure import DeviceChoice, StepTimeout, measure_compute, run_trial
from rootcause_engine.straggler.settings import Workload
from rootcause_harness.flytekit.straggler_cluster import slow_device

CPU = DeviceChoice(torch.device("cpu"), "gloo", torch.float32)
TINY = Workload(matmul_size=8, matmuls_per_trial=2, allreduce_numel=1, allreduces_per_trial=1, trials=4)


def counting() -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []
    return calls, lambda: calls.append(1)


def test_every_trial_is_lined_up_and_timed() -> None:
    calls, line_up = counting()
    times = measure_compute(TINY, CPU, budget_s=60.0, line_up=line_up)
    assert len(calls) == TINY.trials + 1  # the warm-up trial lines up too
    assert len(times) == TINY.trials and all(t >= 0 for t in times)


def test_a_failing_device_still_lines_up_for_every_trial_then_raises() -> None:
    calls, line_up = counting()

    def broken(trial: Callable[[], None]) -> None:
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        measure_compute(TINY, CPU, budget_s=60.0, line_up=line_up, runner=broken)
    assert len(calls) == TINY.trials + 1  # the other workers are not left waiting at a barrier


def test_a_step_past_its_budget_still_lines_up_for_every_trial_then_times_out() -> None:
    calls, line_up = counting()
    with pytest.raises(StepTimeout, match="compute step took over"):
        measure_compute(TINY, CPU, budget_s=0.0, line_up=line_up)
    assert len(calls) == TINY.trials + 1


def test_the_runner_runs_each_trial_once() -> None:
    ran: list[int] = []

    def runner(trial: Callable[[], None]) -> None:
        ran.append(1)
        trial()

    measure_compute(TINY, CPU, budget_s=60.0, line_up=lambda: None, runner=runner)
    assert len(ran) == TINY.trials + 1


def test_simulated_slow_device_factor_must_be_at_least_one() -> None:
    assert slow_device(1.0) is run_trial
    with pytest.raises(ValueError, match="must be >= 1"):
        slow_device(0.5)
