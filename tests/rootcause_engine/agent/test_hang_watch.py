"""The agent's hang watch with real processes: their ``/proc`` counters, their beacon files, the round's
store (torch's ``HashStore``) shared with a peer pod, and its settings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.diagnosis.stalled_rank import PeerWait, ProgressRule, waits_from_text, waits_text
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch, hang_settings
from rootcause_engine.agent.launch_ledger import LaunchedWorker, Teardown
from rootcause_engine.agent.peer_watch import RoundStore
from rootcause_engine.agent.round_ledger import RoundLedger
from rootcause_engine.agent.worker_progress import process_tree_usage
from rootcause_engine.thread_guard import GuardedLoop, LoopGuard
from rootcause_engine.worker.progress_beacon import BeaconReading, GroupProgress, beacon_path
from testbed.sync import wait_until

S = 1_000_000_000
_SLEEP = "import time; time.sleep(60)"
_COMPUTE = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: sum(range(10000))"


def _start(processes: list[subprocess.Popen[bytes]], code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code])
    processes.append(process)
    return process


def test_a_process_tree_s_cpu_and_io_are_read_with_its_children(tmp_path: Path,
                                                                  processes: list[subprocess.Popen[bytes]]) -> None:
    parent = _start(processes, "import subprocess, sys, time\n"
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                               f"open({str(tmp_path / 'f')!r}, 'wb').write(b'x' * (2 << 20))\n"
                               "while time.process_time() < 0.6: pass\n"
                               "time.sleep(60)")
    deadline = time.monotonic() + 120  # a busy machine may take long to give it 0.6 s of CPU
    while time.monotonic() < deadline:
        usage = process_tree_usage(parent.pid)
        assert usage is not None
        if usage.processes == 2 and usage.cpu_s >= 0.5 and usage.io_bytes >= 2 << 20 and usage.state == "S":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"never saw the child, the CPU and the write: {usage}")
    parent.kill()
    parent.wait()
    assert process_tree_usage(parent.pid) is None


class _Watcher:
    def exit_of(self, pid: int) -> object:
        return None


class _Ledger:
    """The launch ledger's part the watch reads: one attempt, its workers, no teardown yet."""

    def __init__(self, workers: list[LaunchedWorker]) -> None:
        self.workers = workers
        self.watcher = _Watcher()
        self.teardown: int | None = None

    def last_attempt(self) -> int:
        return 0

    def teardown_of(self, attempt: int) -> Teardown:
        return Teardown(began_ns=self.teardown)

    def workers_of(self, attempt: int) -> list[LaunchedWorker]:
        return self.workers


class _Peers:
    """The peer watch's part the watch uses: the round's store, this pod group rank 0 of 2."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def round_store(self) -> RoundStore:
        def call(operation: str, *args: Any) -> Any:
            return getattr(self.store, operation)(*args)

        return RoundStore(call, 0, 2, True, RoundLedger(call, 2, 0))


def _worker(tmp_path: Path, process: subprocess.Popen[bytes], rank: int, *groups: GroupProgress) -> LaunchedWorker:
    error_dir = tmp_path / f"worker-{rank}"
    error_dir.mkdir()
    error_file = str(error_dir / "error.json")
    reading = BeaconReading(process.pid, time.time_ns(), 0, groups)
    Path(beacon_path(error_file)).write_text(json.dumps(reading.to_json()))
    return LaunchedWorker(attempt=0, local_rank=rank % 2, global_rank=rank, group_rank=0, pid=process.pid,
                          error_file=error_file)


def _looks(watch: HangWatch, seconds: float) -> dict[int, Any]:
    """Look every 0.2 s for ``seconds``; every verdict reached."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        watch.look()
        time.sleep(0.2)
    return watch.found()


def test_a_stopped_process_is_described_with_its_state_and_kernel_wait() -> None:
    """A worker frozen by SIGSTOP (or stuck in a driver call: ``D``) looks like any still rank from
    outside; its state says why, in words the report can carry."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        os.kill(process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 60
        usage = process_tree_usage(process.pid)
        while usage is not None and usage.state != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
            usage = process_tree_usage(process.pid)
        assert usage is not None and usage.state == "T"
        assert usage.describe_state().startswith("T (stopped by a signal: SIGSTOP, a debugger, or a frozen container)")
    finally:
        process.kill()
        process.wait()


def test_a_still_rank_behind_a_peer_pod_s_wait_is_named_and_a_computing_one_is_not(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Ranks 0 (asleep) and 1 (computing) of this pod both stopped at collective 4 of group 0; the
    other pod (group rank 1) said its rank 2 waits in collective 5 since 30 s. Only the still one
    is hung, and the session is told once."""
    store = dist.HashStore()
    since = time.time_ns() - 30 * S
    store.set("rootcause/hang/wait/1", waits_text([PeerWait(2, "pod-1", CollectivePosition("0", 5, "gloo:all_reduce",
                                                                                            since))]))
    asleep, computing = _start(processes, _SLEEP), _start(processes, _COMPUTE)
    workers = [_worker(tmp_path, asleep, 0, GroupProgress("0", 4, 4)),
               _worker(tmp_path, computing, 1, GroupProgress("0", 4, 4))]
    told: list[dict[int, Any]] = []
    watch = HangWatch(_Ledger(workers), _Peers(store), HangSettings(after_s=1.5), on_hung=told.append,  # type: ignore[arg-type]
                      worker_name="pod-0")
    found = _looks(watch, 3.0)
    assert list(found) == [asleep.pid] and [list(call) for call in told] == [[asleep.pid]]
    verdict = found[asleep.pid]
    assert verdict.waits[0].rank == 2 and verdict.stalled.seq == 5 and verdict.waited_s >= 30
    assert waits_from_text(store.get("rootcause/hang/wait/0")) == ()  # this pod waits in nothing


def test_this_pod_s_long_waits_are_published_and_cleared(tmp_path: Path,
                                                         processes: list[subprocess.Popen[bytes]]) -> None:
    """A local rank waiting in collective 5 since 10 s (more than half of ``after_s``) is said in the
    store, where the peers read it; once its collective completed, the pod says it waits in nothing."""
    store = dist.HashStore()
    waiting = _start(processes, _SLEEP)
    worker = _worker(tmp_path, waiting, 0, GroupProgress("0", 5, 4, since_ns=time.time_ns() - 10 * S, op="gloo:x"))
    watch = HangWatch(_Ledger([worker]), _Peers(store), HangSettings(after_s=12.0),  # type: ignore[arg-type]
                      worker_name="pod-0")
    assert watch.look() == {}
    [wait] = waits_from_text(store.get("rootcause/hang/wait/0"))
    assert (wait.rank, wait.worker, wait.position.seq, wait.position.op) == (0, "pod-0", 5, "gloo:x")
    reading = BeaconReading(waiting.pid, time.time_ns(), 0, (GroupProgress("0", 5, 5),))
    Path(beacon_path(worker.error_file)).write_text(json.dumps(reading.to_json()))
    watch.look()
    assert waits_from_text(store.get("rootcause/hang/wait/0")) == ()


def test_nothing_is_looked_at_once_the_teardown_began_or_for_another_worker_s_file(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    asleep = _start(processes, _SLEEP)
    worker = _worker(tmp_path, asleep, 0, GroupProgress("0", 4, 4))
    local_wait = _start(processes, _SLEEP)
    other = _worker(tmp_path, local_wait, 1, GroupProgress("0", 5, 4, since_ns=time.time_ns() - 30 * S))
    ledger = _Ledger([worker, other])
    watch = HangWatch(ledger, None, HangSettings(after_s=1.0))  # type: ignore[arg-type]
    reading = BeaconReading(os.getpid(), time.time_ns(), 0, (GroupProgress("0", 4, 4),))  # a previous worker's
    Path(beacon_path(worker.error_file)).write_text(json.dumps(reading.to_json()))
    assert _looks(watch, 1.6) == {}
    ledger.teardown = time.time_ns()
    assert watch.look() == {}


def test_the_settings_are_checked_and_none_turns_the_watch_off() -> None:
    assert hang_settings(ElasticRootCause(nnodes=2)) == HangSettings(after_s=60.0)
    assert hang_settings(ElasticRootCause(nnodes=2, hang_after_s=None)) is None
    assert hang_settings(ElasticRootCause(nnodes=2, hang_after_s=90, hang_idle_cpu_fraction=0.05)) == HangSettings(
        after_s=90.0, rule=ProgressRule(idle_cpu_fraction=0.05))
    for fields, message in [({"hang_after_s": 5}, "hang_after_s must be >= 10"),
                            ({"hang_after_s": True}, "hang_after_s must be >= 10"),
                            ({"hang_idle_cpu_fraction": 0}, "hang_idle_cpu_fraction must be between 0 and 1"),
                            ({"hang_idle_cpu_fraction": 1.5}, "hang_idle_cpu_fraction must be between 0 and 1")]:
        with pytest.raises(ValueError, match=message):
            ElasticRootCause(nnodes=2, **fields)


def test_the_launch_s_watch_thread_never_waits_for_a_look_and_skips_a_turn_while_one_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The looks run on the callback pool: a look that blocks (a store call that hangs) holds neither
    the watch thread nor its other duty (the agent watchdog's looks), and no second look starts
    while it runs."""
    release = threading.Event()
    looks: list[str] = []
    other: list[int] = []

    def blocking_look() -> dict[int, Any]:
        looks.append(threading.current_thread().name)
        release.wait(60)
        return {}

    loop = GuardedLoop("rootcause-launch-watch")
    watch = HangWatch(_Ledger([]), None, HangSettings(after_s=1.5, interval_s=0.01), loop=loop)  # type: ignore[arg-type]
    monkeypatch.setattr(watch, "look", blocking_look)
    loop.every(0.01, lambda: other.append(1), guard=LoopGuard("other duty"))
    loop.start()
    try:
        with watch:
            assert wait_until(lambda: looks, 60)
            seen = len(other)
            assert wait_until(lambda: len(other) >= seen + 20, 60)  # the thread goes on meanwhile
            assert looks == ["rootcause-callback"]  # one look at a time, on the pool
            release.set()
            assert wait_until(lambda: len(looks) >= 2, 60)
    finally:
        release.set()
        loop.stop(60)
