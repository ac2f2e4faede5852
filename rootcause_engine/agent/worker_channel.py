"""Soft restarts, agent side of the file channel: one event file per local worker (the RFC's file option).

The format and the worker's reader are in :mod:`rootcause_engine.worker.world_events`. The
agent appends whole lines (one ``write`` of a line opened for append); a worker that reads while a
line is being written leaves the incomplete line for its next read. When a local worker is
restarted, its file is replaced (written aside, then renamed) *before* the new process starts, so
the new process never sees its predecessor's worlds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rootcause_engine.worker.world_events import EVENTS_DIR_VARIABLE, WorkerEvent, events_path, waiting_path


class WorkerChannel:
    """The event files of one pod's workers, under one directory made for the launch."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = Path(directory or tempfile.mkdtemp(prefix="rootcause-soft-restart-"))
        self.directory.mkdir(parents=True, exist_ok=True)

    def start_fresh(self, local_rank: int, event: WorkerEvent) -> None:
        """Before (re)starting this worker: its file holds ``event`` only, and no old waiting note."""
        path = events_path(self.directory, local_rank)
        partial = path.with_name(f".{path.name}.new")
        partial.write_text(event.to_line(), encoding="utf-8")
        partial.replace(path)
        waiting_path(self.directory, local_rank).unlink(missing_ok=True)

    def publish(self, local_rank: int, event: WorkerEvent) -> None:
        """Append ``event`` to one worker's file."""
        with open(events_path(self.directory, local_rank), "a", encoding="utf-8") as handle:
            handle.write(event.to_line())

    def waiting(self, pids: dict[int, int]) -> bool:
        """Whether every one of these workers (local rank -> pid) has said it waits for a world."""
        for local_rank, pid in pids.items():
            try:
                said = waiting_path(self.directory, local_rank).read_text().strip()
            except FileNotFoundError:
                return False
            if said != str(pid):
                return False
        return True

    def environment(self) -> dict[str, str]:
        """What the workers need to find their files."""
        return {EVENTS_DIR_VARIABLE: os.fspath(self.directory)}
