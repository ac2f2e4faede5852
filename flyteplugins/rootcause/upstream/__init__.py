"""Which Flyte 2 internals the Flyte 2 flavour uses, checked before the first use.

The task extends private parts of ``flyteplugins.pytorch`` and of flyte's runtime. A release may rename
them. So this package checks them once, in one verdict (:func:`flyte_readiness`). A missing internal
turns the diagnosis off, and the task runs upstream's ``TorchFunctionTask.execute``. A version
outside the verified ranges runs it with a warning. The user hears both where the task is defined
(:func:`check_flyte`), never as an error. ``docs/flyte2.md`` lists the internals.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rootcause_engine.upstream.patching import patched
from rootcause_engine.upstream.readiness import Readiness, check, engine_seams
from rootcause_engine.upstream.versions import Symbol, installed_version, require

_TASK = "flyteplugins.pytorch.task"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.pre", "calls: Elastic's NCCL and process settings"),
    Symbol("flyteplugins-pytorch", _TASK, "TorchFunctionTask.post", "calls after a successful launch"),
    Symbol("flyteplugins-pytorch", _TASK, "launcher_entrypoint", "hands torch as each worker's entrypoint"),
    Symbol("flyte", "flyte._context", "internal_ctx", "reads the task context the launch runs in"),
    Symbol("flyte", "flyte._bin.runtime", "main", "runs the action (the a0 command) after the SIGTERM notice"),
    Symbol("flyte", "flyte._internal.runtime.convert", "convert_from_native_to_error", "the last-resort writer"),
    Symbol("flyte", "flyte._internal.runtime.io", "upload_error", "the last-resort writer: error.pb"),
    Symbol("flyte", "flyte.models", "CLUSTERED_WORKER_ENV", "marks a pod without rank 0 as a nonzero-rank worker"),
    Symbol("flyte", "flyte._internal.runtime.io", "_is_nonzero_rank_clustered_worker",
           "skips the outputs.pb and error.pb of a nonzero-rank worker"),
    Symbol("flyte", "flyte._internal.runtime.io", "report_path",
           "reads back to keep the report tabs that rank 0's workers flushed"),
    Symbol("flyte", "flyte._internal.runtime.io", "error_path", "names the error.pb this pod wrote itself"),
    Symbol("flyte", "flyte._internal.runtime.taskrunner", "upload_error",
           "replaces while a0 runs: an error.pb this pod already wrote (retried, within a deadline) is not "
           "written again without either"),
)

#: The console script of flyte's runtime, the main process of every pod of a Flyte 2 action.
RUNTIME_SCRIPT = "a0"
#: This flavour's console script that runs it: the kubelet's SIGTERM noted first
#: (:mod:`flyteplugins.rootcause.runtime`); the task's container args name it instead of ``a0``.
ROOTCAUSE_RUNTIME_SCRIPT = "rootcause-a0"
#: The flag on the command line of a process that ``multiprocessing`` spawned (its ``spawn_main``).
SPAWNED_WORKER_FLAG = "--multiprocessing-fork"


def in_pod_main_process() -> bool:
    """This process is a pod's ``a0`` (flyte's or this flavour's): not a user's ``flyte run --local`` or
    a notebook, and not a worker it spawned (``multiprocessing`` gives a spawned worker its parent's
    ``sys.argv`` while it imports the task; only the interpreter's own command line tells it apart)."""
    return os.path.basename(sys.argv[0] if sys.argv else "") in (RUNTIME_SCRIPT, ROOTCAUSE_RUNTIME_SCRIPT) and (
        SPAWNED_WORKER_FLAG not in sys.orig_argv
    )


def flyte_readiness(restart_policy: str | None = "hard") -> Readiness:
    """This flavour's verdict: its flyte and flyteplugins-pytorch internals and the torch seams of a
    launch under ``restart_policy`` (``None``: this seam alone, which loads no torch)."""
    engine = () if restart_policy is None else engine_seams(restart_policy)
    return check((*engine, __name__))


def check_flyte(restart_policy: str = "hard") -> Readiness:
    """Warn where the task is defined (``ElasticRootCause``: in the user's process, at
    ``flyte.TaskEnvironment(plugin_config=...)`` and ``flyte run``) when an upstream version is not
    verified or lacks an internal; never raises: the pods check again and train either way."""
    readiness = flyte_readiness(restart_policy)
    readiness.announce(warn=True)
    return readiness


def internal_ctx() -> Any:
    """flyte's context of the running task (its mode, its task context, the replace it offers)."""
    require(SYMBOLS)
    from flyte._context import internal_ctx as flyte_internal_ctx

    return flyte_internal_ctx()


def report_file(output_path: str) -> str:
    """Where ``flyte.report.flush()`` writes the action's report: ``report.html`` under its outputs."""
    require(SYMBOLS)
    from flyte._internal.runtime.io import report_path

    return report_path(output_path)


#: The ids of flyte's report template (``flyte/report/_template.html``, private) that the plugin reads
#: a flushed ``report.html`` back by (:mod:`flyteplugins.rootcause.report_page`): the tab bar, whose
#: ``<li>`` items name the tabs, and the container, whose ``<div>`` children hold them in that order.
REPORT_TABS_ID = "flyte-frame-tabs"
REPORT_BODIES_ID = "flyte-frame-container"
REPORT_TEMPLATE_IDS: tuple[str, ...] = (REPORT_TABS_ID, REPORT_BODIES_ID)
#: The tab :func:`report_template_problem` renders: a name to escape, a body with a nested ``<div>``.
_PROBE_TABS: tuple[tuple[str, str], ...] = (
    ("rootcause <probe> & tab", '<div id="rootcause-probe"><div>1</div></div>'),
    ("rootcause second tab", "<p>2</p>"),
)


def report_template_problem(read_back: Callable[[str], Sequence[tuple[str, str]] | None]) -> str | None:
    """Why the installed flyte's report page cannot be read back by ``read_back`` (the page reader),
    or ``None``: a page of probe tabs rendered by flyte's own ``Report`` must carry every id of
    :data:`REPORT_TEMPLATE_IDS` and read back as those tabs. Never raises."""
    from flyte.report import Report

    version = installed_version("flyte")
    try:
        report = Report("rootcause-probe")
        for name, html in _PROBE_TABS:
            report.get_tab(name).log(html)
        page = report.get_final_report()
        page = page if isinstance(page, str) else str(getattr(page, "data", page))  # IPython's HTML
    except Exception as error:
        return f"flyte {version} cannot render a report page ({error!r})"
    missing = [name for name in REPORT_TEMPLATE_IDS if f'id="{name}"' not in page]
    if missing:
        return (f"flyte {version}'s report template has no id {', '.join(map(repr, missing))}, by which the "
                "plugin reads report.html back")
    try:
        tabs = read_back(page)
    except Exception as error:
        tabs = None
        reason = f" ({error!r})"
    else:
        reason = ""
    if tabs is None or [tuple(tab) for tab in tabs] != list(_PROBE_TABS):
        return f"flyte {version}'s report page does not read back as the tabs it was rendered from{reason}"
    return None


def upload_error_document(error: BaseException, output_path: str, timeout_s: float | None = None) -> None:
    """Write ``<output_path>/error.pb`` for ``error`` as Flyte 2's runtime does after a task raised it
    (the agent watchdog exits the process, so the runtime never gets to).

    One try: the runtime's upload (obstore, with its own few retries), cancelled after ``timeout_s``
    (``TimeoutError``; ``None``: unbounded), so that the caller's retries keep to their deadline
    (``flyteplugins.rootcause.task``). Runs on the watchdog's sink thread, which has no event loop
    of its own.
    """
    require(SYMBOLS)
    from flyte._internal.runtime.convert import convert_from_native_to_error
    from flyte._internal.runtime.io import upload_error

    converted = convert_from_native_to_error(error)
    upload = upload_error(converted.err, output_path, recoverable=converted.recoverable)
    asyncio.run(asyncio.wait_for(upload, timeout_s))


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
    require(SYMBOLS)
    from flyte.models import CLUSTERED_WORKER_ENV

    os.environ[CLUSTERED_WORKER_ENV] = "1"
    if not results:  # no worker of this pod returned (none ran): nothing to convert either
        os.environ["RANK"] = "1"
        return None
    first_rank = min(results)
    os.environ["RANK"] = str(first_rank)
    return results[first_rank]


def run_by_rootcause_runtime(args: list[str]) -> list[str]:
    """The container args of a task with :data:`ROOTCAUSE_RUNTIME_SCRIPT` in place of flyte's ``a0``
    (args that start with anything else are returned as they are: another runtime command)."""
    return [ROOTCAUSE_RUNTIME_SCRIPT, *args[1:]] if args[:1] == [RUNTIME_SCRIPT] else list(args)


#: The output prefixes whose ``error.pb`` this process wrote itself (:func:`note_error_document_written`).
_ERROR_DOCUMENTS_WRITTEN: set[str] = set()


def note_error_document_written(output_path: str) -> None:
    """This pod wrote ``<output_path>/error.pb`` itself, retried within a deadline: the runtime's own
    upload of the same document, one try with no deadline, is skipped (:func:`run_flyte_runtime`)."""
    _ERROR_DOCUMENTS_WRITTEN.add(output_path)


def run_flyte_runtime(diagnosis_on: bool = True) -> None:
    """Run flyte's ``a0`` command in this process, on this process's command line (click parses it).

    With the diagnosis on, the runtime's ``upload_error`` leaves alone an ``error.pb`` this pod wrote
    itself: the task writes its error with retries and a deadline (``flyteplugins.rootcause.task``),
    and a store that stalls on the runtime's second write must not hold the pod past its decision.
    """
    from flyte._bin.runtime import main

    if not diagnosis_on:
        main()
        return
    from flyte._internal.runtime import taskrunner
    from flyte._internal.runtime.io import error_path

    upload_error = taskrunner.upload_error

    async def upload_unless_written(err: Any, output_prefix: str, recoverable: bool = True) -> str:
        if output_prefix in _ERROR_DOCUMENTS_WRITTEN:
            return error_path(output_prefix)
        return await upload_error(err, output_prefix, recoverable=recoverable)

    with patched(taskrunner, upload_error=upload_unless_written):
        main()
