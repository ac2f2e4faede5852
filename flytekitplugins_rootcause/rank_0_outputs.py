"""flytekit's side of the wait for rank 0's outputs: its store looks, and when a pod waits.

kfpytorch's ``_execute`` raises ``IgnoreOutputs`` in a pod whose launch succeeded without global
rank 0, and ``pyflyte-execute`` then writes nothing and exits 0, possibly before rank 0's pod wrote
``outputs.pb``; the training operator marks the job Succeeded at the first pod that exits 0, and
Flyte reads the outputs then (:mod:`rootcause_engine.agent.rank_0_outputs` says why, and waits).
:func:`rank_0_outputs_awaited` holds that ``IgnoreOutputs`` back until ``<output_prefix>/outputs.pb``
or an error document is there, or raises :class:`Rank0OutputsMissingError` when the bound passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import fsspec
from flytekit.core.base_task import IgnoreOutputs
from flytekit.core.context_manager import FlyteContextManager
from flytekit.core.data_persistence import FileAccessProvider

from flytekitplugins_rootcause.exceptions import Rank0OutputsMissingError
from rootcause_core.error_files import is_error_file_name
from rootcause_core.pod_stop import POD_STOP
from rootcause_core.store_paths import base_name, join
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.isolation_gate import FsspecBoard
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.rank_0_outputs import OUTPUTS_FILE_NAME, missing_outputs, wait_for_rank_0_outputs


@dataclasses.dataclass(frozen=True)
class OutputPrefix:
    """The task's output prefix, looked at through flytekit's file access (the credentials,
    endpoints and filesystems flytekit configured for the task, as for its own uploads)."""

    file_access: FileAccessProvider
    prefix: str

    def outputs_written(self) -> bool:
        """``<prefix>/outputs.pb`` exists."""
        self._uncached()
        return bool(self.file_access.exists(join(self.prefix, OUTPUTS_FILE_NAME)))

    def error_written(self) -> bool:
        """Any error document (``error*.pb``) lies directly under the prefix: flytekit's, ours, any pod's."""
        try:
            names = self._uncached().ls(self.prefix, detail=False)
        except FileNotFoundError:  # nothing was written under the prefix yet
            return False
        return any(is_error_file_name(base_name(str(name))) for name in names)

    def board(self) -> FsspecBoard:
        """The prefix as the isolation gate's third party (pods that lost each other post there)."""
        return FsspecBoard(self.file_access.get_filesystem_for_path(self.prefix), self.prefix)

    def _uncached(self) -> fsspec.AbstractFileSystem:
        """The prefix's filesystem with its listings of the prefix forgotten: fsspec instances are
        shared and cache listings (gcsfs, s3fs), and ``exists`` answers from a cached listing, which
        would say "absent" for ever."""
        fs = self.file_access.get_filesystem_for_path(self.prefix)
        fs.invalidate_cache(self.prefix)
        return fs


def current_output_prefix() -> OutputPrefix | None:
    """The running task's output prefix, as ``pyflyte-execute`` set it up; ``None`` in a local run
    (no prefix: nothing reads outputs there, so nothing is waited for)."""
    ctx = FlyteContextManager.current_context()
    prefix = ctx.user_space_params.output_metadata_prefix
    return None if not prefix else OutputPrefix(ctx.file_access, prefix)


def await_rank_0_outputs(where: OutputPrefix, peers: PeerWatch | None, timeout_s: float) -> None:
    """Return once rank 0's outputs (or an error document) are under ``where``; raise
    :class:`Rank0OutputsMissingError` when neither came within ``timeout_s``. ``peers``: ``None``
    for a pod whose diagnosis is off (its error then names no members)."""
    wait = wait_for_rank_0_outputs(where.outputs_written, where.error_written, timeout_s=timeout_s,
                                   stopped_at=lambda: POD_STOP.received_monotonic)
    worker, members = (current_worker_name(), ()) if peers is None else (peers.worker, peers.members())
    missing = missing_outputs(wait, output_prefix=where.prefix, worker=worker, members=members)
    if missing is not None:
        raise Rank0OutputsMissingError(missing)


@contextlib.contextmanager
def rank_0_outputs_awaited(peers: PeerWatch | None, timeout_s: float) -> Iterator[None]:
    """Around a launch: kfpytorch's ``IgnoreOutputs`` for a launch that succeeded without rank 0
    leaves only once rank 0's outputs are written (:func:`await_rank_0_outputs`). Around upstream's
    launch too (``peers`` ``None``): the wait uses kfpytorch's public ``IgnoreOutputs`` and the
    object store, no torch internal, so a pod whose diagnosis is off keeps it.

    kfpytorch raises ``IgnoreOutputs`` on two roads: after a launch that returned without rank 0's
    value (nothing being handled then), and while it handles torch's ``SignalException`` (this pod's
    agent was told to stop: the pod is being ended, and must not linger). Only the first one waits.
    """
    try:
        yield
    except IgnoreOutputs as ignored:
        where = current_output_prefix()
        if ignored.__context__ is not None or where is None:
            raise
        try:
            await_rank_0_outputs(where, peers, timeout_s)
        except Rank0OutputsMissingError as missing:
            raise missing from None  # the IgnoreOutputs it replaces explains nothing
        raise
