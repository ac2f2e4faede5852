"""Flyte 2's side of the wait for rank 0's outputs: its store looks, through ``flyte.storage``.

A pod whose launch succeeded without global rank 0 writes nothing
(:func:`flyteplugins.rootcause.upstream.leave_outputs_to_rank_0`) and exits 0, possibly before rank
0's pod wrote ``outputs.pb``; the training operator marks the job Succeeded at the first pod that
exits 0, and Flyte reads the outputs then (:mod:`rootcause_engine.agent.rank_0_outputs` says why,
and waits). :func:`await_rank_0_outputs` runs before that marking: once it is made, the runtime
writes neither ``outputs.pb`` nor ``error.pb`` for this ``a0``, so the error for outputs that never
came must be raised before it, to reach ``error.pb``.
"""

from __future__ import annotations

import asyncio
import dataclasses

from flyte import storage

from flyteplugins.rootcause.exceptions import Rank0OutputsMissingError
from rootcause_core.error_files import ERROR_FILE_NAME
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.rank_0_outputs import OUTPUTS_FILE_NAME, missing_outputs, wait_for_rank_0_outputs


@dataclasses.dataclass(frozen=True)
class ActionOutputs:
    """The action's output path, looked at through ``flyte.storage`` (the filesystems and credentials
    Flyte 2's runtime uses for its own uploads). Flyte 2 reads one ``error.pb`` per action, which
    every failing pod writes: that is the error document looked for."""

    output_path: str

    def outputs_written(self) -> bool:
        return self._exists(OUTPUTS_FILE_NAME)

    def error_written(self) -> bool:
        return self._exists(ERROR_FILE_NAME)

    def _exists(self, name: str) -> bool:
        """``name`` is under the output path now. The path's cached listing, if any, is forgotten
        first: fsspec instances are shared, and ``exists`` answers from a cached listing, which would
        say "absent" for ever."""
        storage.get_underlying_filesystem(path=self.output_path).invalidate_cache(self.output_path)
        return storage.exists_sync(storage.join(self.output_path, name))


async def await_rank_0_outputs(output_path: str, peers: PeerWatch, timeout_s: float) -> None:
    """Return once rank 0's ``outputs.pb`` (or ``error.pb``) is under ``output_path``; raise
    :class:`Rank0OutputsMissingError` when neither came within ``timeout_s``.

    The looks and pauses run on a thread of their own, so ``a0``'s event loop stays free meanwhile.
    """
    where = ActionOutputs(output_path)
    wait = await asyncio.to_thread(
        wait_for_rank_0_outputs, where.outputs_written, where.error_written, timeout_s=timeout_s
    )
    missing = missing_outputs(wait, output_prefix=output_path, worker=peers.worker, members=peers.members())
    if missing is not None:
        raise Rank0OutputsMissingError(missing)
