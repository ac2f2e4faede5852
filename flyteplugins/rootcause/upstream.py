"""Which Flyte 2 internals the Flyte 2 flavour uses, checked before the first use.

The task extends ``flyteplugins.pytorch``'s ``TorchFunctionTask`` (its ``pre``, ``post``, the
worker entrypoint it hands torch), and the agent watchdog's last-resort writer uses the runtime's
own error conversion and upload (so the document it writes is the one ``a0`` would write for the
same exception, flyteidl2's ``ErrorDocument``). These are private names: a release that renames
them must fail with a clear message (``rootcause_engine.upstream.versions``), not write nothing.
A pod without rank 0 leaves the action's outputs to rank 0's pod through the runtime's own rule for
clustered workers (:func:`leave_outputs_to_rank_0`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from rootcause_engine.upstream.versions import Symbol, require

_TASK = "flyteplugins.pytorch.task"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.pre", "calls: Elastic's NCCL and process settings"),
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.post", "calls after a successful launch"),
    Symbol("flyteplugins-pytorch", _TASK, "launcher_entrypoint", "hands torch as each worker's entrypoint"),
    Symbol("flyte", "flyte._context", "internal_ctx", "reads the task context the launch runs in"),
    Symbol("flyte", "flyte._internal.runtime.convert", "convert_from_native_to_error", "the last-resort writer"),
    Symbol("flyte", "flyte._internal.runtime.io", "upload_error", "the last-resort writer: error.pb"),
    Symbol("flyte", "flyte.models", "CLUSTERED_WORKER_ENV", "marks a pod without rank 0 as a nonzero-rank worker"),
    Symbol("flyte", "flyte._internal.runtime.io", "_is_nonzero_rank_clustered_worker",
           "skips the outputs.pb and error.pb of a nonzero-rank worker"),
)


def check_flyte() -> None:
    """Refuse an unsupported flyte or flyteplugins-pytorch (once per process)."""
    require(SYMBOLS)


def upload_error_document(error: BaseException, output_path: str) -> None:
    """Write ``<output_path>/error.pb`` for ``error`` as Flyte 2's runtime does after a task raised it
    (the agent watchdog exits the process, so the runtime never gets to).

    Runs on the watchdog's sink thread, which has no event loop of its own.
    """
    check_flyte()
    from flyte._internal.runtime.convert import convert_from_native_to_error
    from flyte._internal.runtime.io import upload_error

    converted = convert_from_native_to_error(error)
    asyncio.run(upload_error(converted.err, output_path, recoverable=converted.recoverable))


def leave_outputs_to_rank_0(results: dict[int, Any]) -> Any:
    """What ``a0`` returns on a pod whose launch succeeded without rank 0, marking itself so that
    Flyte 2's runtime writes neither ``outputs.pb`` nor ``error.pb`` for it.

    Every pod's ``a0`` shares the action's output prefix, and only rank 0's value is the task's
    output. Upstream's ``Elastic`` returns ``None`` there: the runtime fails that value's type check
    and writes a ``DataValidationError`` to ``error.pb``, and the backend fails a job that succeeded
    (flytekit's ``IgnoreOutputs`` has no Flyte 2 equivalent). The runtime's rule for clustered
    workers is the one Flyte 2 has: a process marked as a clustered worker (``CLUSTERED_WORKER_ENV``)
    with a nonzero ``RANK`` uploads neither file. This ``a0`` is that: the agent of ranks that are
    not 0, its workers ended. It returns its first rank's value (the same function, so the same
    type), which the runtime converts and does not upload.
    """
    check_flyte()
    from flyte.models import CLUSTERED_WORKER_ENV

    os.environ[CLUSTERED_WORKER_ENV] = "1"
    if not results:  # no worker of this pod returned (none ran): nothing to convert either
        os.environ["RANK"] = "1"
        return None
    first_rank = min(results)
    os.environ["RANK"] = str(first_rank)
    return results[first_rank]
