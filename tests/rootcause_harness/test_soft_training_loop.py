"""``rootcause_harness/soft_training_loop.py``: a run under torch's hard restarts in a world of one (its
result, its log, its injected failure with the front-end's exceptions), bad arguments, and the readers
of the workers' logs that the scenarios judge steps and world changes by."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from rootcause_harness.faults import SIM_DIR_VARIABLE
from rootcause_harness.loopback import free_port
from rootcause_harness.soft_training_loop import (
    SOFT_LOG_DIR,
    assert_every_step_once,
    changes_of,
    followed_steps,
    read_worker_logs,
    run_soft_training,
    steps_of,
)


class Recoverable(Exception):
    pass


class Fatal(Exception):
    pass


def _run(steps: int, **kwargs: Any) -> float:
    arguments: dict[str, Any] = {"init_s": 0.0, "step_s": 0.0, "fail_pod": "", "fail_local_rank": 0, "fail_step": 1,
                                 "fail_again": False} | kwargs
    return run_soft_training(steps, **arguments, recoverable_error=Recoverable, fatal_error=Fatal)


def _only_log(sim_dir: Path) -> list[dict[str, Any]]:
    [[events]] = read_worker_logs(sim_dir).values()
    return events


def test_a_run_without_a_failure_sums_every_step_once_and_logs_it(world_of_one: Path) -> None:
    assert _run(4) == 10.0  # steps * (steps + 1) / 2
    assert list(read_worker_logs(world_of_one)) == [("train-worker-0", 0)]
    events = _only_log(world_of_one)
    assert [e["event"] for e in events] == ["start", "world", "step", "step", "step", "step"]
    assert events[0]["restarted"] is False
    assert (events[1]["version"], events[1]["world_size"], events[1]["change"], events[1]["step"]) == (0, 1, None, 0)
    assert steps_of(events) == [1, 2, 3, 4]
    assert_every_step_once(events, 4)
    assert not dist.is_initialized()


@pytest.mark.parametrize(("fatal", "error"), [(False, Recoverable), (True, Fatal)])
def test_the_failing_worker_raises_the_front_ends_exception_at_its_step(world_of_one: Path, fatal: bool,
                                                                       error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^injected failure at step 2 on train-worker-0 local rank 0$"):
        _run(5, fail_pod="train-worker-0", fail_step=2, fail_fatal=fatal)
    events = _only_log(world_of_one)
    assert steps_of(events) == [1, 2] and events[-1] == {**events[-1], "event": "fault", "step": 2, "kind": "raise"}


def test_a_restarted_worker_fails_again_only_with_fail_again(world_of_one: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert _run(2, fail_pod="train-worker-0", fail_step=0) == 3.0
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with pytest.raises(Recoverable, match="at step 0"):
        _run(2, fail_pod="train-worker-0", fail_step=5, fail_again=True)
    events = _only_log(world_of_one)  # one process: both runs in its one log
    assert [(e["event"], e.get("restarted")) for e in events if e["event"] in ("start", "fault")] == [
        ("start", True), ("start", True), ("fault", None)]


def test_another_pods_failure_is_not_this_workers(world_of_one: Path) -> None:
    assert _run(3, fail_pod="p-9", fail_step=1) == 6.0


@pytest.mark.parametrize(("argument", "message"), [({"fail_kind": "melt"}, "fail_kind must be one of"),
                                                   ({"loop": "custom"}, "loop must be one of")])
def test_an_unknown_fail_kind_or_loop_is_refused_before_anything_runs(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      argument: dict[str, str], message: str) -> None:
    monkeypatch.setenv(SIM_DIR_VARIABLE, str(tmp_path))
    with pytest.raises(ValueError, match=message):
        _run(3, **argument)
    assert list(tmp_path.iterdir()) == []


def _write_log(sim_dir: Path, name: str, events: list[dict[str, Any]]) -> None:
    folder = sim_dir / SOFT_LOG_DIR
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_worker_logs_are_grouped_by_pod_and_local_rank_in_start_order(tmp_path: Path) -> None:
    assert read_worker_logs(tmp_path) == {}
    _write_log(tmp_path, "train-worker-1-0-300", [{"event": "start", "t": 20.0}])
    _write_log(tmp_path, "train-worker-1-0-100", [{"event": "start", "t": 10.0}, {"event": "step", "t": 11, "step": 1}])
    _write_log(tmp_path, "train-worker-0-1-200", [{"event": "start", "t": 5.0}])
    logs = read_worker_logs(tmp_path)
    assert set(logs) == {("train-worker-1", 0), ("train-worker-0", 1)}
    assert [runs[0]["t"] for runs in logs[("train-worker-1", 0)]] == [10.0, 20.0]
    assert logs[("train-worker-1", 0)][0][1] == {"event": "step", "t": 11, "step": 1}


def _world(step: int, change: str | None) -> dict[str, Any]:
    return {"event": "world", "step": step, "change": change}


def _step(step: int) -> dict[str, Any]:
    return {"event": "step", "step": step}


def test_a_survivor_caught_up_one_step_at_a_world_change_went_through_every_step() -> None:
    events = [_world(0, None), _step(1), _step(2), _world(3, "SCALE_DOWN"), _step(4), _world(4, "SCALE_UP"), _step(5)]
    assert steps_of(events) == [1, 2, 4, 5]
    assert followed_steps(events) == ([1, 2, 3, 4, 5], [3])
    assert changes_of(events) == [None, "SCALE_DOWN", "SCALE_UP"]
    assert_every_step_once(events, 5)


def test_steps_lost_or_taken_twice_fail_the_check() -> None:
    with pytest.raises(AssertionError, match="caught up on"):
        assert_every_step_once([_world(0, None), _step(1), _world(4, "SCALE_DOWN"), _step(5)], 5)
    with pytest.raises(AssertionError):
        assert_every_step_once([_world(0, None), _step(1), _step(2), _world(1, "SCALE_DOWN"), _step(2)], 2)
    with pytest.raises(AssertionError):
        assert_every_step_once([_world(0, None), _step(1)], 2)
