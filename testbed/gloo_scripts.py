"""One-process gloo scripts run as subprocesses by the seam's smoke test and ``benchmarks.gloo_exit_race``.

The script all-reduces twice with the Flight Recorder on, reads this plugin's view of the recorder,
and prints the last collective's position. ``destroy=False`` is the form that once turned the suite
red: torch 2.13 can abort a process whose gloo group is still alive at interpreter exit
(docs/upstream.md), so the smoke test always ends its group, and the benchmark counts both forms.
"""

from __future__ import annotations

_FLIGHT_RECORDER_SCRIPT = """
import os, tempfile
os.environ["TORCH_FR_BUFFER_SIZE"] = "16"
import torch, torch.distributed as dist
from rootcause_engine.upstream.torch_worker import flight_recorder_entries
from rootcause_core.collectives import positions_from_entries
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
for _ in range(2):
    dist.all_reduce(torch.ones(1))
(position,) = positions_from_entries(flight_recorder_entries() or [])
if {destroy}:
    dist.destroy_process_group()
print(position.seq, position.op, position.entered_ns is not None)
"""

#: What the script prints when the recorder saw both all-reduces.
FLIGHT_RECORDER_EXPECTED = ["2", "gloo:all_reduce", "True"]


def recorded_position(stdout: str) -> list[str]:
    """What the script printed of the position: its last line (torch 2.8's gloo prints its
    connection count on stdout before it)."""
    lines = stdout.splitlines()
    return lines[-1].split() if lines else []


def flight_recorder_script(*, destroy: bool) -> str:
    """The script's source; ``destroy``: end the gloo group before the interpreter exits."""
    return _FLIGHT_RECORDER_SCRIPT.format(destroy=destroy)
