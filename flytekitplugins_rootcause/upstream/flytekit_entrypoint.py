"""How ``pyflyte-rootcause-execute`` hooks into flytekit's ``pyflyte-execute`` (module ``flytekit.bin.entrypoint``).

:mod:`flytekitplugins_rootcause.entrypoint.command` decides what the error document holds and
where it goes; this module is the only place that knows which flytekit names to swap for it:

- the command itself (``execute_task_cmd``: its click parameters and callback are reused);
- ``_dispatch_execute``, which the callback looks up as a module global, swapped for ours;
- the module-level helpers flytekit's ``_dispatch_execute`` looks up while it writes the error
  document (:data:`ERROR_DOCUMENT_HOOKS`), swapped for the duration of one task run;
- the ``put_data`` of the run's file-access provider, swapped on that instance only.

The originals are captured once, at the first use (which is the import of the command module),
before anything is swapped, so a replacement can always call flytekit's own function. Importing
this module imports flytekit only, never torch: plain tasks run through this entrypoint too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import click
import flytekit.bin.entrypoint as flytekit_entrypoint

from rootcause_engine.upstream.patching import patched
from rootcause_engine.upstream.versions import Symbol, require

_ENTRYPOINT = "flytekit.bin.entrypoint"

#: The console script of the patched entrypoint (setup.cfg names it; the task image puts it on PATH).
PATCHED_ENTRYPOINT = "pyflyte-rootcause-execute"
#: flytekit's own entrypoint, which flytekit puts first in a task's container args.
FLYTEKIT_ENTRYPOINT = "pyflyte-execute"

#: The helpers of ``_dispatch_execute`` swapped while it runs: error-file name, worker name, error
#: timestamp, error message.
ERROR_DOCUMENT_HOOKS = (
    "_build_error_file_name",
    "_get_worker_name",
    "get_container_error_timestamp",
    "get_traceback_str",
)


def _flytekit(path: str, why: str, module: str = _ENTRYPOINT) -> Symbol:
    return Symbol("flytekit", module, path, why)


SYMBOLS: tuple[Symbol, ...] = (
    _flytekit("execute_task_cmd", "reuses (its click parameters and callback) as pyflyte-rootcause-execute"),
    _flytekit("_dispatch_execute", "replaces while the command runs, and calls"),
    _flytekit("_build_error_file_name", "replaces while a task runs, to stage the error document"),
    _flytekit("_get_worker_name", "replaces while a task runs, to name the worker in the error document"),
    _flytekit("get_container_error_timestamp", "replaces while a task runs (exact time), and calls"),
    _flytekit("get_traceback_str", "replaces while a task runs (root-cause report), and calls"),
    _flytekit("get_one_of", "calls, to read the distributed error strategy"),
    _flytekit(
        "FileAccessProvider.put_data",
        "replaces on the run's instance, to take the error document out of the upload",
        module="flytekit.core.data_persistence",
    ),
)


def with_patched_entrypoint(command: list[str]) -> list[str]:
    """A task's container args with flytekit's ``pyflyte-execute`` swapped for the patched entrypoint.

    Fast registration wraps the args (``pyflyte-fast-execute ... -- pyflyte-execute ...``): the
    swap applies wherever ``pyflyte-execute`` stands.
    """
    return [PATCHED_ENTRYPOINT if arg == FLYTEKIT_ENTRYPOINT else arg for arg in command]


class RunsPatchedEntrypoint:
    """Mixin for a flytekit task class whose pods must run ``pyflyte-rootcause-execute``.

    Every task type of this plugin launches torch elastic agents whose failures are written as
    per-worker error documents, and only the patched entrypoint writes them; a task type that
    forgot this would silently fall back to flytekit's single ``error.pb``.
    """

    def get_default_command(self, settings: Any) -> list[str]:
        return with_patched_entrypoint(super().get_default_command(settings))  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class _Originals:
    """flytekit's own functions, as they were before any swap."""

    command: click.Command
    dispatch_execute: Callable[..., Any]
    error_timestamp: Callable[..., Any]
    traceback_str: Callable[[Exception], str]
    get_one_of: Callable[..., str]


@functools.cache
def _originals() -> _Originals:
    require(SYMBOLS)
    return _Originals(
        command=flytekit_entrypoint.execute_task_cmd,
        dispatch_execute=flytekit_entrypoint._dispatch_execute,
        error_timestamp=flytekit_entrypoint.get_container_error_timestamp,
        traceback_str=flytekit_entrypoint.get_traceback_str,
        get_one_of=flytekit_entrypoint.get_one_of,
    )


def flytekit_execute_command() -> click.Command:
    """flytekit's ``pyflyte-execute`` click command."""
    return _originals().command


def dispatch_execute(
    ctx: Any, load_task: Callable[[], Any], inputs_path: str, output_prefix: str, is_map_task: bool = False
) -> Any:
    """flytekit's own ``_dispatch_execute`` (download inputs, run the task, write outputs or the error)."""
    return _originals().dispatch_execute(ctx, load_task, inputs_path, output_prefix, is_map_task)


def container_error_timestamp(e: Exception | None = None) -> Any:
    """flytekit's own ``get_container_error_timestamp`` (a protobuf ``Timestamp``)."""
    return _originals().error_timestamp(e)


def traceback_str(e: Exception) -> str:
    """flytekit's own ``get_traceback_str``: the message of the error document."""
    return _originals().traceback_str(e)


def get_one_of(*names: str) -> str:
    """flytekit's ``get_one_of``: the value of the first of the environment variables ``names`` that is set."""
    return _originals().get_one_of(*names)


@contextlib.contextmanager
def dispatch_execute_replaced(replacement: Callable[..., Any]) -> Iterator[None]:
    """For the block, flytekit's command callback runs ``replacement`` instead of its ``_dispatch_execute``."""
    _originals()
    with patched(flytekit_entrypoint, _dispatch_execute=replacement):
        yield


@contextlib.contextmanager
def error_document_hooks(
    *,
    error_file_name: Callable[[], str],
    worker_name: Callable[[], str],
    error_timestamp: Callable[..., Any],
    error_message: Callable[[Exception], str],
) -> Iterator[None]:
    """For the block, flytekit's ``_dispatch_execute`` names, stamps and words the error document with these.

    They replace, in order, the :data:`ERROR_DOCUMENT_HOOKS`, which ``_dispatch_execute`` looks
    up as module globals each time it runs.
    """
    _originals()
    hooks = dict(zip(ERROR_DOCUMENT_HOOKS, (error_file_name, worker_name, error_timestamp, error_message), strict=True))
    with patched(flytekit_entrypoint, **hooks):
        yield


@contextlib.contextmanager
def put_data_replaced(file_access: Any, put_data: Callable[..., Any]) -> Iterator[None]:
    """For the block, ``file_access.put_data`` (this instance only) is ``put_data``.

    The provider's ``put_data`` is a method of its class; afterwards the instance attribute is
    deleted again, so the class's method shows through as before.
    """
    _originals()
    with patched(file_access, put_data=put_data):
        yield
