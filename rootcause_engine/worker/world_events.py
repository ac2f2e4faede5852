"""Soft restarts, worker side: the events an agent sends its workers, and the file they travel in.

torch's soft-restart RFC lets a worker survive a failure elsewhere in the job: its agent tells it
the world is PAUSED (stop using the process group), then HEALTHY again with new ranks
(:class:`WorkerInfo`). The RFC's file-based channel is used: one append-only file per (agent,
worker), ``<dir>/events-<local rank>.jsonl``, one JSON object per line, written whole by the agent
(:mod:`rootcause_engine.agent.worker_channel`) and read here in order. A worker tells its
agent it is waiting for a world (ready to join one) with ``<dir>/waiting-<local rank>``, holding its
pid: an agent whose workers were restarted joins the job only once they are ready, so the others
wait a rendezvous, not a restarted worker's initialisation.

The directory comes from :data:`EVENTS_DIR_VARIABLE`, set by the agent before its workers start.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from rootcause_core.bounded_json import loads_bounded
from rootcause_engine.store_layout import soft_process_group_prefix

#: Set by the agent for its workers: the directory of the event files.
EVENTS_DIR_VARIABLE = "ROOTCAUSE_SOFT_RESTART_DIR"
#: The longest line an event takes (an event is a few hundred bytes: its host name is the longest part).
MAX_LINE_BYTES = 64 << 10
#: Key prefix, in torch's shared rendezvous store, of each world's process-group keys.


class WorkerState(enum.StrEnum):
    """What a worker may do now: train (``HEALTHY``) or wait for the next world (``PAUSED``)."""

    HEALTHY = "HEALTHY"
    PAUSED = "PAUSED"


class WorldChangeEvent(enum.StrEnum):
    """Why the world changed: a node left it (``SCALE_DOWN``) or (re)joined it (``SCALE_UP``)."""

    SCALE_UP = "SCALE_UP"
    SCALE_DOWN = "SCALE_DOWN"


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """This worker's place in one world (the RFC's names), and how to reach the world's store.

    ``world_version`` numbers the worlds of the job (0: the first rendezvous); each world's process
    group keys live under their own prefix in torch's shared rendezvous store (``master_addr``,
    ``master_port``), so a new world never reads an old one's keys.
    """

    local_rank: int
    role_rank: int
    rank: int
    local_world_size: int
    role_world_size: int
    world_size: int
    master_addr: str
    master_port: int
    world_version: int = 0

    def get_pg_parameters(self, timeout: timedelta | None = None) -> dict[str, Any]:
        """Keyword arguments for ``torch.distributed.init_process_group`` other than ``backend``."""
        import torch.distributed as dist

        store = dist.TCPStore(
            self.master_addr,
            self.master_port,
            is_master=False,
            timeout=timeout or timedelta(minutes=5),
            wait_for_workers=False,
        )
        parameters: dict[str, Any] = {
            "store": dist.PrefixStore(soft_process_group_prefix(self.world_version), store),
            "rank": self.rank,
            "world_size": self.world_size,
        }
        if timeout is not None:
            parameters["timeout"] = timeout
        return parameters


@dataclasses.dataclass(frozen=True)
class WorkerEvent:
    """One message from the agent: the worker's state, why it changed, and (when HEALTHY) its place."""

    timestamp: float
    worker_state: WorkerState
    change_event: WorldChangeEvent | None = None
    worker_info: WorkerInfo | None = None

    def to_line(self) -> str:
        """The event as one line of the channel file (newline included)."""
        entry = {
            "timestamp": self.timestamp,
            "worker_state": self.worker_state.value,
            "change_event": None if self.change_event is None else self.change_event.value,
            "worker_info": None if self.worker_info is None else dataclasses.asdict(self.worker_info),
        }
        return json.dumps(entry, separators=(",", ":")) + "\n"

    @classmethod
    def from_line(cls, line: str) -> WorkerEvent:
        """Parse one line written by :meth:`to_line`; ``ValueError`` if it is not one (a line nested
        too deeply or too long is refused before ``json`` would recurse: :func:`loads_bounded`)."""
        try:
            entry = loads_bounded(line, max_bytes=MAX_LINE_BYTES)
            info = entry.get("worker_info")  # AttributeError for a line that is no object
            change = entry.get("change_event")
            return cls(
                timestamp=float(entry["timestamp"]),
                worker_state=WorkerState(entry["worker_state"]),
                change_event=None if change is None else WorldChangeEvent(change),
                worker_info=None if info is None else WorkerInfo(**info),
            )
        except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as exc:  # OverflowError: float(10**400)
            raise ValueError(f"not a soft-restart worker event: {line[:200]!r}") from exc


def events_path(directory: str | os.PathLike[str], local_rank: int) -> Path:
    """The channel file of one worker."""
    return Path(directory) / f"events-{local_rank}.jsonl"


def waiting_path(directory: str | os.PathLike[str], local_rank: int) -> Path:
    """The file in which a worker says it waits for a world (its pid)."""
    return Path(directory) / f"waiting-{local_rank}"


def read_events(path: Path) -> list[WorkerEvent]:
    """Every complete event of a channel file, in order (a line still being written is left out)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]  # the part after the last newline is not complete yet
    return [WorkerEvent.from_line(line) for line in lines if line]
