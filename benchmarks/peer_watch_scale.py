"""The peer watch at pod counts this machine cannot run: N simulated members on one real TCPStore.

Run by hand: ``.venv/bin/python -m benchmarks.peer_watch_scale [--members 8 64 256 1024]
[--healthy-s 10] [--members-per-shard 32]``.

Each member is the real :class:`~rootcause_engine.agent.peer_watch.PeerWatch` of one pod (its own
store client, its heartbeat thread, its successor watch), with the default heartbeat (0.5 s) and
silence limit (5 s). The members are spread over processes of ``--members-per-shard`` each (a pod's agent is one
process; here one process plays many, so the per-member CPU is an upper bound: the members share
one interpreter lock). The store is a real ``TCPStore`` server in this process, as the store
host's agent serves it. For each N:

Every shard connects its members' clients first, then all members join at the same moment (as
pods leave a rendezvous together), and then:

1. after a warm-up (every member learns the others), healthy for ``--healthy-s``: the store
   operations per second (all members' calls, counted where
   they are made), the agent CPU per member (the shards' CPU time / members / wall time), and any
   verdict reached (there must be none: a false verdict);
2. one member frozen (its heartbeat thread stopped, no word): the time until its watcher's verdict
   and until the last member is told.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import resource
import statistics
import tempfile
import time
from pathlib import Path

from torch.distributed import TCPStore

FROZEN_RANK = 1
#: After joining, before measuring: every member learns the others (a burst of reads, once per job).
WARM_UP_S = 5.0


def _shard(port: int, world: int, ranks: list[int], healthy_s: float, freeze_at: float, report: str) -> None:
    """One process playing ``ranks``: count store calls, record when each member is told of a loss."""
    from rootcause_engine.agent import bounded_store
    from rootcause_engine.agent.peer_watch import PeerWatch
    from rootcause_engine.upstream.torch_elastic import JoinedRound

    calls = [0]
    by_operation: dict[str, int] = {}
    original = bounded_store.BoundedStore.call

    def counted(self: bounded_store.BoundedStore, operation: str, *args: object) -> object:
        calls[0] += 1
        by_operation[operation] = by_operation.get(operation, 0) + 1
        return original(self, operation, *args)

    bounded_store.BoundedStore.call = counted  # type: ignore[method-assign]
    told: dict[int, float] = {}
    watches, stores = {}, {}
    for rank in ranks:
        stores[rank] = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60),
                                wait_for_workers=False)
        watches[rank] = PeerWatch(f"pod-{rank}")
        watches[rank].when_a_peer_is_lost(lambda lost, rank=rank: told.setdefault(rank, time.time()))
    # every pod leaves the rendezvous at the same moment, as in a job: all shards join together
    time.sleep(max(0.0, freeze_at - healthy_s - WARM_UP_S - time.time()))
    joined_late_s = max(0.0, time.time() - (freeze_at - healthy_s - WARM_UP_S))  # start-up overran its time
    for rank in ranks:
        watches[rank].joined(JoinedRound(stores[rank], rank, world, (rank,)))
    time.sleep(max(0.0, freeze_at - healthy_s - time.time()))
    cpu0, calls0, wall0 = resource.getrusage(resource.RUSAGE_SELF), calls[0], time.time()
    operations0 = dict(by_operation)
    time.sleep(max(0.0, freeze_at - time.time()))
    cpu1, calls1, wall1 = resource.getrusage(resource.RUSAGE_SELF), calls[0], time.time()
    false_verdicts = dict(told)  # any verdict before the freeze (the warm-up's included) is a false one
    operations = {name: count - operations0.get(name, 0) for name, count in by_operation.items()}
    if FROZEN_RANK in watches:
        watches[FROZEN_RANK].stop()
    deadline = time.time() + 60
    while len(told) < len(ranks) - (FROZEN_RANK in watches) and time.time() < deadline:
        time.sleep(0.05)
    Path(report).write_text(json.dumps({
        "calls": calls1 - calls0,
        "wall": wall1 - wall0,
        "cpu": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
        "false_verdicts": len(false_verdicts),
        "operations": operations,
        "joined_late_s": joined_late_s,
        "told": {str(rank): at for rank, at in told.items() if rank != FROZEN_RANK},
        "members": len(ranks) - (FROZEN_RANK in watches),
    }))
    for peers in watches.values():
        peers.stop()


def run(members: int, shards: int, healthy_s: float, folder: Path) -> str:
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
    start_up_s = 10 + 4 * shards + members / 40  # each shard imports torch; clients connect
    freeze_at = time.time() + start_up_s + WARM_UP_S + healthy_s
    context = multiprocessing.get_context("spawn")
    processes, reports = [], []
    for shard in range(shards):
        ranks = list(range(shard, members, shards))
        report = folder / f"shard-{members}-{shard}.json"
        reports.append(report)
        process = context.Process(target=_shard, args=(server.port, members, ranks, healthy_s, freeze_at, str(report)))
        process.start()
        processes.append(process)
    for process in processes:
        process.join(timeout=start_up_s + WARM_UP_S + healthy_s + 120)
        if process.is_alive():
            process.kill()
    data = [json.loads(path.read_text()) for path in reports if path.exists()]
    if len(data) < shards:
        return f"{members:>6} | shards did not finish ({len(data)}/{shards})"
    calls = sum(d["calls"] for d in data)
    wall = statistics.mean(d["wall"] for d in data)
    cpu = sum(d["cpu"] for d in data)
    told = [at for d in data for at in d["told"].values()]
    alive = sum(d["members"] for d in data)
    first = min(told) - freeze_at if told else float("nan")
    last = max(told) - freeze_at if len(told) == alive else float("nan")
    operations: dict[str, int] = {}
    for d in data:
        for name, count in d["operations"].items():
            operations[name] = operations.get(name, 0) + count
    per_second = ", ".join(f"{name} {count / wall:.0f}" for name, count in sorted(operations.items()))
    late = max(d["joined_late_s"] for d in data)
    return (
        f"{members:>6} | {calls / wall:>10.0f} | {1000 * cpu / wall / members:>12.2f} | "
        f"{sum(d['false_verdicts'] for d in data):>5} | {first:>8.2f} | {last:>8.2f} | {len(told)}/{alive}"
        f" | {per_second}" + (f" | a shard joined {late:.1f} s late" if late > 0.5 else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--healthy-s", type=float, default=10.0)
    parser.add_argument("--members-per-shard", type=int, default=32,
                        help="members one process plays (each has two threads: heartbeat and store client)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rootcause-scale-"))
    print("members | store ops/s | CPU ms/s per member | false verdicts | freeze -> verdict s | "
          "-> last told s | told | ops/s by operation", flush=True)
    for members in args.members:
        print(run(members, max(1, -(-members // args.members_per_shard)), args.healthy_s, folder), flush=True)


if __name__ == "__main__":
    main()
