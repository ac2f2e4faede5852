"""Which Flyte 2 internals the Flyte 2 flavour uses, checked before the first use.

The task extends ``flyteplugins.pytorch``'s ``TorchFunctionTask`` (its ``pre``, ``post``, the
worker entrypoint it hands torch), and the agent watchdog's last-resort writer uses the runtime's
own error conversion and upload (so the document it writes is the one ``a0`` would write for the
same exception, flyteidl2's ``ErrorDocument``). These are private names: a release that renames
them must fail with a clear message (``rootcause_engine.upstream.versions``), not write nothing.
"""

from __future__ import annotations

import asyncio

from rootcause_engine.upstream.versions import Symbol, require

_TASK = "flyteplugins.pytorch.task"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.pre", "calls: Elastic's NCCL and process settings"),
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.post", "calls after a successful launch"),
    Symbol("flyteplugins-pytorch", _TASK, "launcher_entrypoint", "hands torch as each worker's entrypoint"),
    Symbol("flyte", "flyte._context", "internal_ctx", "reads the task context the launch runs in"),
    Symbol("flyte", "flyte._internal.runtime.convert", "convert_from_native_to_error", "the last-resort writer"),
    Symbol("flyte", "flyte._internal.runtime.io", "upload_error", "the last-resort writer: error.pb"),
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
