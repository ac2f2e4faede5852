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

from flyteplugins.rootcause.action_outputs import ActionOutputs
from flyteplugins.rootcause.exceptions import Rank0OutputsMissingError
from rootcause_core.pod_stop import POD_STOP
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.agent.rank_0_outputs import missing_outputs, wait_for_rank_0_outputs


async def await_rank_0_outputs(output_path: str, peers: PeerWatch, timeout_s: float) -> None:
    """Return once rank 0's ``outputs.pb`` (or ``error.pb``) is under ``output_path``; raise
    :class:`Rank0OutputsMissingError` when neither came within ``timeout_s``.

    The looks and pauses run on a thread of their own, so ``a0``'s event loop stays free meanwhile.
    """
    where = ActionOutputs(output_path)
    wait = await asyncio.to_thread(
        wait_for_rank_0_outputs, where.outputs_written, where.error_written, timeout_s=timeout_s,
        stopped_at=lambda: POD_STOP.received_monotonic,
    )
    missing = missing_outputs(wait, output_prefix=output_path, worker=peers.worker, members=peers.members())
    if missing is not None:
        raise Rank0OutputsMissingError(missing)
