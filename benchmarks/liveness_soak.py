"""No false verdicts: healthy pods whose agents are starved and paused are never declared lost.

Run by hand: ``.venv/bin/python -m benchmarks.liveness_soak [--pods 4] [--minutes 30] [--load 2]
[--max-pause-s 2.5] [--cpu-quota 0.2] [--memory-hog-gb 8]``.

Each pod is one process running the real :class:`~rootcause_engine.agent.peer_watch.PeerWatch`
(the agent's heartbeat thread and its successor watch, default heartbeat 0.5 s and ``lost_after_s``
5 s) against one real ``TCPStore`` (served by this process, as the store host's agent serves it).
``--load`` busy processes compete for the CPU the whole time, and at random moments one pod's whole
process is paused with SIGSTOP for a random time up to half of ``lost_after_s`` (a long garbage
collection, a starved or throttled agent), then resumed. ``--cpu-quota F`` puts each pod in a cgroup
of its own (v1 ``cpu`` controller, as a container's CPU limit is) allowed ``F`` of one core, and
``--memory-hog-gb G`` runs a process that keeps allocating and touching ``G`` GiB and letting it go
(page faults and reclaim for everyone). Printed: pauses, their longest, and the verdicts any pod
reached (there must be none while every pause is shorter than ``lost_after_s``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from torch.distributed import TCPStore

from benchmarks.cpu_load import busy_processes


def _pod(port: int, rank: int, pods: int, report: str, stop_file: str) -> None:
    from rootcause_engine.agent.peer_watch import PeerWatch
    from rootcause_engine.upstream.torch_elastic import JoinedRound

    told: list[list[object]] = []
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
    peers = PeerWatch(f"pod-{rank}")
    peers.when_a_peer_is_lost(lambda lost: told.append([p.entry() for p in lost]))
    peers.joined(JoinedRound(store, rank, pods, (rank,)))
    while not os.path.exists(stop_file):
        time.sleep(0.2)
    peers.finish()
    Path(report).write_text(json.dumps(told))


#: The cgroup v1 CPU controller's mount (a container's ``cpu.cfs_quota_us`` lives there).
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
_PERIOD_US = 100_000


@contextlib.contextmanager
def cpu_quota(pids: list[int], fraction: float | None) -> Iterator[None]:
    """Each of ``pids`` in a cgroup of its own with ``fraction`` of one core (none: no limit)."""
    if fraction is None:
        yield
        return
    groups = []
    try:
        for pid in pids:
            group = CPU_CGROUPS / f"rootcause-soak-{os.getpid()}-{pid}"
            group.mkdir()
            groups.append(group)
            (group / "cpu.cfs_period_us").write_text(str(_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(int(fraction * _PERIOD_US)))
            (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        for group in groups:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (CPU_CGROUPS / "cgroup.procs").write_text(pid)
                group.rmdir()


_HOG = """
import os, time
size = int(float(os.environ["HOG_GB"]) * (1 << 30))
while os.getppid() == int(os.environ["HOG_PARENT"]):
    block = bytearray(size)
    for offset in range(0, size, 4096):
        block[offset] = 1
    del block
    time.sleep(0.5)
"""


@contextlib.contextmanager
def memory_hog(gib: float | None) -> Iterator[None]:
    """A process that allocates, touches and frees ``gib`` GiB over and over (none: no hog)."""
    if not gib:
        yield
        return
    env = os.environ | {"HOG_GB": str(gib), "HOG_PARENT": str(os.getpid())}
    hog = subprocess.Popen([sys.executable, "-c", _HOG], env=env, stdin=subprocess.DEVNULL)
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--load", type=int, default=2, help="busy processes competing for the CPU")
    parser.add_argument("--max-pause-s", type=float, default=2.5, help="half of lost_after_s by default")
    parser.add_argument("--cpu-quota", type=float, default=None, help="each pod's share of one core (cgroup v1)")
    parser.add_argument("--memory-hog-gb", type=float, default=None, help="GiB a hog keeps allocating and freeing")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rootcause-soak-"))
    stop_file = str(folder / "stop")
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
    context = multiprocessing.get_context("spawn")
    reports = [str(folder / f"pod-{rank}.json") for rank in range(args.pods)]
    pods = [
        context.Process(target=_pod, args=(server.port, rank, args.pods, reports[rank], stop_file))
        for rank in range(args.pods)
    ]
    for process in pods:
        process.start()
    rng = random.Random(0)
    pauses: list[float] = []
    pod_pids = [process.pid for process in pods if process.pid is not None]
    with busy_processes(args.load), cpu_quota(pod_pids, args.cpu_quota), memory_hog(args.memory_hog_gb):
        time.sleep(15 if args.cpu_quota is None else 15 / args.cpu_quota)  # every pod imported torch and joined
        end = time.monotonic() + 60 * args.minutes
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.5, 5.0))
            victim, pause = rng.choice(pods), rng.uniform(0.1, args.max_pause_s)
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGSTOP)
            time.sleep(pause)
            os.kill(victim.pid, signal.SIGCONT)
            pauses.append(pause)
    Path(stop_file).touch()
    for process in pods:
        process.join(timeout=60)
    verdicts = [json.loads(Path(report).read_text()) for report in reports if Path(report).exists()]
    limits = f", {args.cpu_quota:g} of a core per pod" if args.cpu_quota else ""
    limits += f", a {args.memory_hog_gb:g} GiB memory hog" if args.memory_hog_gb else ""
    print(f"{args.pods} pods, {args.minutes:g} min, {args.load} busy processes{limits}: {len(pauses)} pauses "
          f"(longest {max(pauses, default=0):.2f} s, max allowed {args.max_pause_s:g} s); "
          f"verdicts: {sum(len(v) for v in verdicts)} ({len(verdicts)}/{args.pods} pods reported)")


if __name__ == "__main__":
    main()
