"""``soft_restart.is_peer_failure``: a survivor tells a peer's failure from its own error, whatever its
backend raises (real gloo processes), and waits for its agent's word when the text names no peer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from rootcause_engine import soft_restart
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.worker.world_events import WorkerEvent, WorkerState
from tests.rootcause_engine.agent.test_worker_channel import _healthy

#: Two gloo ranks: rank 1 dies in the middle of training (no word, as a lost pod); rank 0's next
#: all-reduce raises whatever gloo raises, and rank 0 says what it was and how it is classified.
_SURVIVOR = textwrap.dedent(
    """
    import datetime, json, os, sys
    import torch, torch.distributed as dist
    from rootcause_engine import soft_restart

    rank, store_path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=20))
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        os._exit(1)
    try:
        for _ in range(100):
            dist.all_reduce(torch.ones(4))
    except Exception as error:
        print(json.dumps({"type": type(error).__name__, "is_dist_error": isinstance(error, dist.DistError),
                          "peer": soft_restart.is_peer_failure(error),
                          "own": soft_restart.is_peer_failure(ValueError("bad batch"))}))
    os._exit(0)
    """
)


def test_a_gloo_survivor_s_error_is_a_peer_failure_and_its_own_error_is_not(tmp_path: Path) -> None:
    script = tmp_path / "survivor.py"
    script.write_text(_SURVIVOR)
    processes = [
        subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path / "store")], stdout=subprocess.PIPE,
                         text=True)
        for rank in (0, 1)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    seen = json.loads(outputs[0].strip().splitlines()[-1])
    # torch 2.13's gloo raises a plain RuntimeError here, not a DistError: an `except dist.DistError`
    # loop would let it kill the survivor
    assert seen == {"type": "RuntimeError", "is_dist_error": False, "peer": True, "own": False}, outputs


def test_an_error_that_names_no_peer_is_one_when_the_agent_pauses_the_world(channel: WorkerChannel) -> None:
    """A peer's failure can surface as any exception (a user's wrapper re-raises it as its own); the
    agent's PAUSED, arriving while the survivor waits, decides."""
    channel.start_fresh(0, _healthy(1))
    soft_restart._this_channel().version = 1  # this worker joined world 1
    assert not soft_restart.is_peer_failure(ValueError("bad batch"), wait_s=0.05)
    pause = threading.Timer(0.2, lambda: channel.publish(0, WorkerEvent(time.time(), WorkerState.PAUSED)))
    pause.start()
    assert soft_restart.is_peer_failure(ValueError("wrapped: step failed"), wait_s=60)
    pause.join()
    # once the world is paused, any error of the step is taken for the world's change at once
    assert soft_restart.is_peer_failure(KeyError("x"), wait_s=0)


def test_nccl_s_and_hostile_errors_are_classified_without_a_traceback() -> None:
    import torch.distributed as dist

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text for you")

    assert soft_restart.is_peer_failure(dist.DistBackendError("NCCL error: remote process exited"), wait_s=0)
    assert soft_restart.is_peer_failure(RuntimeError("NCCL communicator was aborted on rank 3"), wait_s=0)
    assert not soft_restart.is_peer_failure(Hostile(), wait_s=0)
