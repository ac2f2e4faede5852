"""Start N real ``pyflyte-rootcause-execute`` processes that fail at the same moment.

Usage: ``python -m tests.entrypoint_tasks.fork_writers COUNT BARRIER_DIR LOG_DIR -- <entrypoint args>``

Why forks of one loaded process: every entrypoint process imports flytekit (and the task module,
torch included) before it runs anything, about 1-3 s of CPU each; 32 of them per store would take
minutes of the CI's 2 cores. Here the console script's entry point (looked up by name, exactly as
the installed ``pyflyte-rootcause-execute`` script does), the task module and the store's fsspec
class are imported once, then each writer is ``fork()``-ed and runs the command's full ``main()``
with its own argv and worker name: its own process, click parsing, flytekit setup, input download,
task load and run, error document and store connections. Nothing of the code under test is shared
or skipped; only the imports are.

All writers block in the task on a FIFO barrier (``raising.wait_at_barrier``) after loading and
running up to the failure; once all are ready the barrier opens, every writer raises at once, and
the uploads race. Prints a JSON object ``{worker: exit status}``; each writer's stderr goes to
``LOG_DIR/<worker>.err``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

from fsspec.utils import get_protocol

from backend_reader.filesystems import filesystem_class
from tests.entrypoint_tasks.raising import BARRIER_FIFO, BARRIER_READY

SCRIPT = "pyflyte-rootcause-execute"
READY_TIMEOUT_S = 120.0


def _entry_point():
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name=SCRIPT)
    return entry.load()


def _writer(command, worker: str, args: list[str], log_dir: Path) -> None:
    """Child: become one pod named ``worker`` and run the entrypoint; never returns."""
    code = 1
    try:
        os.environ["_F_WN"] = worker
        log = os.open(log_dir / f"{worker}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 2)
        os.dup2(log, 1)
        try:
            sys.argv = [SCRIPT, *args]
            command()  # the console script, as the pod's command line runs it
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    separator = argv.index("--")
    count, barrier, log_dir = int(argv[0]), Path(argv[1]), Path(argv[2])
    args = argv[separator + 1 :]
    (barrier / BARRIER_READY).mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    os.mkfifo(barrier / BARRIER_FIFO)
    os.environ["ROOTCAUSE_TEST_BARRIER_DIR"] = str(barrier)

    command = _entry_point()
    importlib.import_module(args[args.index("task-module") + 1])
    filesystem_class(get_protocol(args[args.index("--output-prefix") + 1]))

    children: dict[int, str] = {}
    for index in range(count):
        worker = f"writer-{index:02d}"
        pid = os.fork()
        if pid == 0:
            _writer(command, worker, args, log_dir)
        children[pid] = worker

    statuses: dict[str, int] = {}
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready = barrier / BARRIER_READY
    while len(list(ready.iterdir())) + len(statuses) < count and time.monotonic() < deadline:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid:
            statuses[children[pid]] = os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    # Release every writer at once: opening the FIFO for writing wakes all readers blocked in
    # open(). O_RDWR never blocks (Linux), and the write end stays open until all are done, so a
    # writer still between "ready" and open() passes straight through.
    release = os.open(barrier / BARRIER_FIFO, os.O_RDWR)
    try:
        while len(statuses) < count:
            pid, status = os.waitpid(-1, 0)
            statuses[children[pid]] = os.waitstatus_to_exitcode(status)
    finally:
        os.close(release)
    print(json.dumps(dict(sorted(statuses.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
