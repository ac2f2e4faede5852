"""The world watcher lets a survivor out of a collective blocked on a frozen peer (real gloo processes).

A frozen peer closes no socket, so a survivor blocked in an all-reduce with it would wait out the
collective timeout. The agent's scale-down reaches the survivor's world watcher, which leaves the
group's transport. The agents agree on the smaller world within milliseconds, so the PAUSED is
often superseded by the next HEALTHY before the watcher (which looks every 50 ms) reads it: that
must end the blocked collective just the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.worker.world_events import WorkerEvent, WorkerInfo, WorkerState, WorldChangeEvent
from testbed.tcp_store import master_store

#: One rank of three: joins world 0 through the plugin's worker hook and ``reinitialize``, trains;
#: rank 2 freezes itself (SIGSTOP) at step 3. A survivor writes what ended its all-reduce.
_RANK = textwrap.dedent(
    """
    import datetime, json, os, signal, sys, time
    import torch, torch.distributed as dist
    from rootcause_engine import soft_restart

    rank, out = int(sys.argv[1]), sys.argv[2]
    soft_restart.follow_process_groups()  # what the agent's hook runs in every soft-restart worker
    soft_restart.reinitialize("gloo", timeout=datetime.timedelta(seconds=120))
    for step in range(100000):
        if rank == 2 and step == 3:
            os.kill(os.getpid(), signal.SIGSTOP)
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as error:
            with open(out, "w") as handle:
                json.dump({"step": step, "error": str(error)[:300]}, handle)
            os._exit(0)
        time.sleep(0.02)
    """
)


def _info(rank: int, world_size: int, port: int, version: int) -> WorkerInfo:
    return WorkerInfo(0, rank, rank, 1, world_size, world_size, "127.0.0.1", port, version)


@contextlib.contextmanager
def _ranks_in_world_0(
    tmp_path: Path, script: str, world_size: int, healthy_at: float
) -> Iterator[tuple[int, list[WorkerChannel], list[subprocess.Popen[bytes]]]]:
    """``world_size`` processes running ``script`` (argv: the rank, then its ``out-<rank>`` file), each
    with its channel on world 0 (HEALTHY at ``healthy_at``); yields the store's port, the channels and
    the processes, and kills every one still running at the end."""
    server = master_store(timeout_s=30)
    path = tmp_path / "rank.py"
    path.write_text(script)
    channels, processes = [], []
    try:
        for rank in range(world_size):
            directory = tmp_path / f"pod-{rank}"
            directory.mkdir()
            channel = WorkerChannel(str(directory))
            info = _info(rank, world_size, server.port, 0)
            channel.start_fresh(0, WorkerEvent(healthy_at, WorkerState.HEALTHY, None, info))
            channels.append(channel)
            env = os.environ | {"ROOTCAUSE_SOFT_RESTART_DIR": str(directory), "LOCAL_RANK": "0"}
            processes.append(subprocess.Popen([sys.executable, str(path), str(rank), str(tmp_path / f"out-{rank}")],
                                              env=env))
        yield server.port, channels, processes
    finally:
        for process in processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()


@pytest.mark.slow
def test_a_scale_down_whose_paused_was_already_superseded_still_ends_the_blocked_collective(tmp_path: Path) -> None:
    with _ranks_in_world_0(tmp_path, _RANK, 3, time.time()) as (port, channels, processes):
        deadline = time.monotonic() + 120
        while not all(Path(f"/proc/{p.pid}/stat").read_text().split()[2] == "T" for p in processes[2:]):
            assert time.monotonic() < deadline, "rank 2 never froze"
            time.sleep(0.05)
        time.sleep(0.5)  # the survivors are blocked in their all-reduce with the frozen rank
        for channel in channels[:2]:  # the agents' scale-down: PAUSED, then at once HEALTHY
            channel.publish(0, WorkerEvent(time.time(), WorkerState.PAUSED, WorldChangeEvent.SCALE_DOWN))
        for rank, channel in enumerate(channels[:2]):
            smaller = _info(rank, 2, port, 1)
            channel.publish(0, WorkerEvent(time.time(), WorkerState.HEALTHY, WorldChangeEvent.SCALE_DOWN, smaller))
        for process in processes[:2]:
            process.wait(timeout=60)  # well under the group's 120 s collective timeout
        for rank in (0, 1):
            seen = json.loads((tmp_path / f"out-{rank}").read_text())
            assert "Timed out" not in seen["error"], seen


#: One rank of two: joins world 0 as ``_RANK`` does, says so (``<out>.ready``), and once told to go
#: (``<out>.go``) runs 100 all-reduces; writes how far it got.
_STEADY_RANK = textwrap.dedent(
    """
    import datetime, json, os, sys, time
    import torch, torch.distributed as dist
    from rootcause_engine import soft_restart

    rank, out = int(sys.argv[1]), sys.argv[2]
    soft_restart.follow_process_groups()
    soft_restart.reinitialize("gloo", timeout=datetime.timedelta(seconds=120))
    dist.barrier()
    open(out + ".ready", "w").close()
    while not os.path.exists(out + ".go"):
        time.sleep(0.01)
    error = None
    for step in range(100):
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as caught:
            error = str(caught)[:300]
            break
        time.sleep(0.02)
    with open(out, "w") as handle:
        json.dump({"step": step, "error": error}, handle)
    """
)


@pytest.mark.slow
def test_a_paused_from_before_the_group_s_world_leaves_the_group_alone(tmp_path: Path) -> None:
    """The agent's PAUSED of a scale-down comes before the HEALTHY of the smaller world; a watcher that
    read the PAUSED and acts only once its worker made the smaller world's group (a loaded machine
    holds a thread that long) must not end that group: its peers would fail in
    ``init_process_group``. Here the PAUSED the watcher finds is one from before the group's world,
    and both ranks run their 100 all-reduces to the end."""
    healthy_at = time.time()
    with _ranks_in_world_0(tmp_path, _STEADY_RANK, 2, healthy_at) as (_, channels, processes):
        outs = [tmp_path / f"out-{rank}" for rank in range(2)]
        deadline = time.monotonic() + 120
        while not all(out.with_name(out.name + ".ready").exists() for out in outs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes), "world 0 never formed"
            time.sleep(0.05)
        for channel in channels:
            channel.publish(0, WorkerEvent(healthy_at - 1.0, WorkerState.PAUSED, WorldChangeEvent.SCALE_DOWN))
        for out in outs:
            out.with_name(out.name + ".go").touch()
        for process in processes:
            assert process.wait(timeout=120) == 0
        for rank in (0, 1):
            seen = json.loads((tmp_path / f"out-{rank}").read_text())
            assert seen == {"step": 99, "error": None}, seen
