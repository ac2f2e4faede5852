"""Worker side: answer the agent's "where are you?" before it tears this worker down. A rank that
hangs raises nothing, and the agent's teardown then ends it like any victim. So before the teardown
the agent sends :data:`PROBE_SIGNAL` to every live worker that installed this probe. Each answers
with its threads' stacks and its last collectives, in two files next to its error file. The stacks
come even when the main thread is stuck in native code.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import threading
import time
from types import FrameType
from typing import IO, Any

from rootcause_core.collectives import positions_from_entries
from rootcause_engine.upstream.torch_worker import flight_recorder_entries
from rootcause_engine.worker.complete_files import write_complete
from rootcause_engine.worker.point_to_point import open_point_to_point_calls

#: The signal the agent sends to ask for the probe files (SIGUSR2: free in torch and flytekit).
PROBE_SIGNAL = signal.SIGUSR2
READY_FILE_NAME = "hang-probe.ready"
STACKS_FILE_NAME = "stacks.txt"
COLLECTIVES_FILE_NAME = "collectives.json"

#: The probe of this process: the stacks file must stay open for ``faulthandler`` to write to it.
_installed: dict[str, Any] = {}


def probe_paths(error_dir: str) -> tuple[str, str, str]:
    """(ready marker, stacks file, collectives file) of the worker whose error file is in ``error_dir``."""
    return (
        os.path.join(error_dir, READY_FILE_NAME),
        os.path.join(error_dir, STACKS_FILE_NAME),
        os.path.join(error_dir, COLLECTIVES_FILE_NAME),
    )


def collective_positions_json() -> list[dict[str, Any]]:
    """This process's last collective per process group and its open point-to-point calls (each
    naming its peer), as written into its error file too."""
    entries = flight_recorder_entries()
    positions = [*positions_from_entries(entries or []), *open_point_to_point_calls()]
    return [position.to_json() for position in positions]


def _write_collectives(path: str) -> None:
    document = {"pid": os.getpid(), "written_ns": time.time_ns(), "collectives": collective_positions_json()}
    write_complete(path, json.dumps(document))


def install_hang_probe(error_file: str | None) -> bool:
    """Install the probe in this worker (main thread only; idempotent). False where it cannot be."""
    if not error_file or _installed or threading.current_thread() is not threading.main_thread():
        return False
    ready, stacks, collectives = probe_paths(os.path.dirname(error_file))
    try:
        stacks_file: IO[str] = open(stacks, "w", encoding="utf-8")  # noqa: SIM115 - kept open for faulthandler
    except OSError:
        return False

    def answer(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(Exception):  # never let the probe hurt the worker
            _write_collectives(collectives)

    signal.signal(PROBE_SIGNAL, answer)
    # the C-level dump first, at once; then (chain) the Python handler above when the interpreter runs
    faulthandler.register(PROBE_SIGNAL, file=stacks_file, all_threads=True, chain=True)
    _installed.update(stacks_file=stacks_file, paths=(ready, stacks, collectives))
    with open(ready, "w", encoding="utf-8") as marker:
        marker.write(str(os.getpid()))
    return True
