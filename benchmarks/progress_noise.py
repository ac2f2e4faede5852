"""What the hang watch sees of a rank from outside: CPU time and I/O per look, idle vs working, under load.

Run by hand: ``.venv/bin/python -m benchmarks.progress_noise [--loads 0,8,48] [--seconds 60]``.

Four gloo ranks on this machine, each with its progress beacon (``worker.progress_beacon``, every
2 s) after 2,100 all-reduces (the Flight Recorder ring full): rank 0 then waits in an all-reduce for
the others, rank 1 sleeps (a hang in user code), rank 2 computes (matrix products, one thread),
rank 3 writes a file at a slow device's pace (``rootcause_harness.faults.write_for``). ``--loads``
busy-loop processes run beside them. Every 2 s, as the hang watch does, the agent side reads each
rank's process tree (``agent.worker_progress``) and its beacon. Printed per load and rank: the CPU
seconds and I/O bytes (less the beacon's own writes) per 2-s look, min/max, the share of one core
over the run, and whether the default rule (``diagnosis.stalled_rank.ProgressRule``) saw it stand
still for the whole run (the idle ranks must, the working ones never).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_multiprocessing

from rootcause_engine.agent.diagnosis.stalled_rank import ProgressRule, ProgressTrack
from rootcause_engine.agent.worker_progress import process_tree_usage
from rootcause_engine.worker.progress_beacon import BEACON_INTERVAL_S, read_beacon, start_progress_beacon
from rootcause_harness.faults import compute_for, write_for
from rootcause_harness.loopback import free_port

ROLES = ("waiting", "asleep", "computing", "writing")


def _rank(rank: int, port: int, folder: str, seconds: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="2000")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=len(ROLES))
    start_progress_beacon(os.path.join(folder, str(rank), "error.json"), BEACON_INTERVAL_S)
    tensor = torch.ones(1000)
    for _ in range(2100):
        dist.all_reduce(tensor)
    Path(folder, str(rank), "ready").touch()
    if ROLES[rank] == "asleep":
        time.sleep(seconds)
    elif ROLES[rank] == "computing":
        compute_for(seconds)
    elif ROLES[rank] == "writing":
        write_for(seconds, Path(folder, "large-file.bin"))
    dist.all_reduce(tensor)  # rank 0 waited here for the others all along


def _spin() -> None:
    while True:
        pass


def measure(load: int, seconds: float) -> None:
    folder = tempfile.mkdtemp(prefix="rootcause-progress-noise-")
    for rank in range(len(ROLES)):
        os.makedirs(os.path.join(folder, str(rank)))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
    for spinner in spinners:
        spinner.start()
    context = torch_multiprocessing.start_processes(
        _rank, args=(free_port(), folder, seconds + 4), nprocs=len(ROLES), join=False, start_method="spawn"
    )
    try:
        pids = context.pids()
        while not all(os.path.exists(os.path.join(folder, str(rank), "ready")) for rank in range(len(ROLES))):
            time.sleep(0.2)
        rule = ProgressRule()
        looks = {rank: [] for rank in range(len(ROLES))}
        first = {rank: (process_tree_usage(pid), read_beacon(os.path.join(folder, str(rank), "progress.json")))
                 for rank, pid in enumerate(pids)}
        tracks = {rank: ProgressTrack.start(usage, beacon.written_bytes if beacon else 0)
                  for rank, (usage, beacon) in first.items()}
        last = dict(first)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(BEACON_INTERVAL_S)
            for rank, pid in enumerate(pids):
                usage = process_tree_usage(pid)
                beacon = read_beacon(os.path.join(folder, str(rank), "progress.json"))
                if usage is None:
                    continue
                own = (beacon.written_bytes if beacon else 0) - (last[rank][1].written_bytes if last[rank][1] else 0)
                looks[rank].append((usage.cpu_s - last[rank][0].cpu_s, usage.io_bytes - last[rank][0].io_bytes - own))
                tracks[rank] = tracks[rank].advanced(usage, beacon.written_bytes if beacon else 0, rule)
                last[rank] = (usage, beacon)
        for rank, role in enumerate(ROLES):
            cpu = [c for c, _ in looks[rank]]
            io = [i for _, i in looks[rank]]
            elapsed = last[rank][0].taken_s - first[rank][0].taken_s
            share = (last[rank][0].cpu_s - first[rank][0].cpu_s) / elapsed
            print(f"load {load:>3}  {role:<9}  CPU per look {min(cpu):6.3f} to {max(cpu):6.3f} s ({100 * share:6.2f} % "
                  f"of a core)  I/O per look {min(io):>9,} to {max(io):>9,} B  still {tracks[rank].still_s:5.1f} s "
                  f"of {elapsed:.0f}", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
        context.join(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0,8,48", help="busy-loop processes beside the ranks, per run")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; one look every {BEACON_INTERVAL_S:g} s for {args.seconds:g} s")
    for load in (int(value) for value in args.loads.split(",")):
        measure(load, args.seconds)


if __name__ == "__main__":
    main()
