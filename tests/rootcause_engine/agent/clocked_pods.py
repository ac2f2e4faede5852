"""Processes for the hang watch's clock tests (``test_hang_watch_clocks.py``), run as
``python -m tests.rootcause_engine.agent.clocked_pods <role> <json>`` with the harness's ``skewed_clock`` first on
``PYTHONPATH``, so that their wall clock is off or steps while their monotonic clock does not.

- ``worker``: a rank whose real progress beacon (every 0.1 s) says it completed collective 4 of group
  0 and, from the monotonic moment ``enter_at`` (or once the file ``enter_file`` exists), waits in
  collective 5 (the Flight Recorder's ring gives the wall-clock time it entered, as torch's does);
- ``pod``: an agent's hang watch over ``workers`` (one look every 0.2 s until the monotonic moment
  ``until``, or until the file ``stop_file`` exists), publishing in and reading from a ``TCPStore``
  when ``port`` is given; writes ``ready_file`` after its first look; prints its looks as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rootcause_engine.agent.launch_ledger import LaunchedWorker, Teardown
from rootcause_engine.agent.peer_watch import RoundStore
from rootcause_engine.agent.round_ledger import RoundLedger
from rootcause_engine.worker.progress_beacon import BeaconReading, GroupProgress, ProgressBeacon, beacon_path

LOOK_S = 0.2


class Watcher:
    def exit_of(self, pid: int) -> object:
        return None


class Ledger:
    """The launch ledger's part the watch reads: one attempt, its workers, no teardown."""

    def __init__(self, workers: list[LaunchedWorker]) -> None:
        self.workers = workers
        self.watcher = Watcher()

    def last_attempt(self) -> int:
        return 0

    def teardown_of(self, attempt: int) -> Teardown:
        return Teardown(began_ns=None)

    def workers_of(self, attempt: int) -> list[LaunchedWorker]:
        return self.workers


class Peers:
    """The peer watch's part the watch uses: the round's store, this pod ``group_rank`` of ``world_size``."""

    def __init__(self, store: Any, group_rank: int, world_size: int) -> None:
        self.store, self.group_rank, self.world_size = store, group_rank, world_size

    def round_store(self) -> RoundStore:
        def call(operation: str, *args: Any) -> Any:
            return getattr(self.store, operation)(*args)

        return RoundStore(call, self.group_rank, self.world_size, self.group_rank == 0,
                          RoundLedger(call, self.world_size, self.group_rank))


def still_beacon(error_file: str, pid: int) -> None:
    """A still rank's beacon: collective 4 of group 0 entered and completed, nothing open."""
    Path(error_file).parent.mkdir(parents=True, exist_ok=True)
    reading = BeaconReading(pid, time.time_ns(), 0, (GroupProgress("0", 4, 4),))
    Path(beacon_path(error_file)).write_text(json.dumps(reading.to_json()))


def worker(config: dict[str, Any]) -> None:
    state: dict[str, int] = {"entered": 4, "created": 0}
    beacon = ProgressBeacon(
        beacon_path(config["error_file"]),
        status=lambda: {"0": (state["entered"], 4)},
        entries=lambda: [{"pg_id": "0", "collective_seq_id": 5, "profiling_name": "gloo:all_reduce",
                          "time_created_ns": state["created"]}] if state["created"] else [],
        open_calls=list,
    )
    beacon.start(0.1)
    enter_file = config.get("enter_file")
    if config.get("ready_file"):  # when it began to wait: a test whose moment came before knows it
        Path(config["ready_file"]).write_text(str(time.monotonic_ns()))
    while not (Path(enter_file).exists() if enter_file else time.monotonic_ns() >= config["enter_at"]):
        time.sleep(0.005)
    state["created"] = time.time_ns()
    state["entered"] = 5
    time.sleep(600)


def pod(config: dict[str, Any]) -> None:
    from rootcause_engine.agent.hang_watch import HangSettings, HangWatch

    peers = None
    if config.get("port"):
        from torch.distributed import TCPStore

        store = TCPStore("127.0.0.1", config["port"], is_master=False)
        peers = Peers(store, config["group_rank"], config["world_size"])
    workers = [LaunchedWorker(0, local, item["rank"], config.get("group_rank", 0), item["pid"], item["error_file"])
               for local, item in enumerate(config["workers"])]
    watch = HangWatch(Ledger(workers), peers, HangSettings(after_s=config["after_s"]),  # type: ignore[arg-type]
                      worker_name=config["name"])
    looks: list[dict[str, Any]] = []
    stop_file = config.get("stop_file")
    while not (Path(stop_file).exists() if stop_file else time.monotonic_ns() >= config["until"]):
        if len(looks) == 1 and config.get("ready_file"):
            Path(config["ready_file"]).touch()
        found = watch.look()
        looks.append({
            "at": time.monotonic_ns(),
            "found": {str(pid): verdict.waited_s for pid, verdict in found.items()},
            "wall_ahead_s": (time.time_ns() - time.clock_gettime_ns(time.CLOCK_REALTIME)) / 1e9,
        })
        time.sleep(LOOK_S)
    print(json.dumps({"looks": looks}), flush=True)


if __name__ == "__main__":
    {"worker": worker, "pod": pod}[sys.argv[1]](json.loads(sys.argv[2]))
