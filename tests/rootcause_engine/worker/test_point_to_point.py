"""The worker's ledger of open send/recv calls, on real gloo processes: a recv that times out names its peer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from rootcause_core.collectives import positions_from_json

#: Two gloo ranks on a file store: rank 0 sends once and then never again; rank 1 receives twice, the
#: second time in vain (a 2 s timeout), and prints what its error file would hold, then the open calls.
_SCRIPT = textwrap.dedent(
    """
    import datetime, json, os, sys, time
    import torch, torch.distributed as dist
    from rootcause_engine.worker.point_to_point import open_point_to_point_calls, record_point_to_point
    from rootcause_engine.worker.hang_probe import collective_positions_json

    rank, store_path = int(sys.argv[1]), sys.argv[2]
    assert record_point_to_point() and record_point_to_point()  # idempotent
    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=2))
    buffer = torch.zeros(4)
    if rank == 0:
        dist.send(torch.ones(4), 1)
        open_after_send = len(open_point_to_point_calls())
        time.sleep(6)  # hung: never sends the second time
        print(json.dumps({"open_after_send": open_after_send}))
    else:
        dist.recv(buffer, src=0)
        open_after_recv = len(open_point_to_point_calls())
        try:
            dist.recv(buffer, src=0)
        except RuntimeError as error:
            print(json.dumps({"open_after_recv": open_after_recv, "error": str(error),
                              "positions": collective_positions_json()}))
    os._exit(0)
    """
)


def test_a_recv_that_times_out_names_the_rank_it_waited_for(tmp_path: Path) -> None:
    script = tmp_path / "ring.py"
    script.write_text(_SCRIPT)
    store = tmp_path / "store"
    processes = [
        subprocess.Popen([sys.executable, str(script), str(rank), str(store)], stdout=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    outputs = [json.loads(process.communicate(timeout=120)[0].strip().splitlines()[-1]) for process in processes]
    sender, receiver = outputs
    assert sender == {"open_after_send": 0} and receiver["open_after_recv"] == 0  # a returned call is closed
    assert "timed out" in receiver["error"].lower()
    (stall,) = [position for position in positions_from_json(receiver["positions"]) if position.is_point_to_point]
    assert (stall.op, stall.awaited, stall.pg) == ("recv", (0,), "0")
