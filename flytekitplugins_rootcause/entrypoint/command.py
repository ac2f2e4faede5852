"""``pyflyte-rootcause-execute``: flytekit's ``pyflyte-execute`` with per-worker error documents.

A pod must keep everything ``pyflyte-execute`` does, and change only its error document. So this
command *is* flytekit's command callback, with the same options and setup. For the length of one
command it swaps the few flytekit helpers that name, stamp and upload the error document. Tasks that
do not ask for root-cause documents run through flytekit untouched. Once this pod's document is
written the command exits 0, because Flyte reads no error document of a job marked Failed. Only a pod
that could write no document at all exits with :data:`WRITE_FAILED_EXIT_CODE`. ``docs/entrypoint.md``
has the details.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from flytekit.core.context_manager import FlyteContext
from flytekit.loggers import logger

from flytekitplugins_rootcause.entrypoint.error_documents import (
    DIST_ERROR_STRATEGY_ENV_VARS,
    ErrorDocumentPlan,
    ErrorDocumentPlanner,
    ErrorFilePolicy,
    decide_policy,
    last_resort_document,
)
from flytekitplugins_rootcause.entrypoint.error_upload import (
    ErrorDocumentWriteError,
    FilesystemSource,
    WriteFailure,
    WriteOutcome,
    write_error_documents,
)
from flytekitplugins_rootcause.entrypoint.root_cause_wait import (
    await_root_cause_document,
    leaves_the_answer_to_another_pod,
    list_names,
    root_cause_wait_s,
)
from flytekitplugins_rootcause.upstream import flytekit_entrypoint
from flytekitplugins_rootcause.upstream.flytekit_entrypoint import PATCHED_ENTRYPOINT
from rootcause_core.pod_exit import exit_without_teardown
from rootcause_core.pod_stop import POD_STOP
from rootcause_core.store_retry import deadline_inside
from rootcause_core.worker_names import display_worker_name, raw_worker_name
from rootcause_engine.agent.failure_sink import DEFAULT_SINK_TIMEOUT_S, failure_sink

if TYPE_CHECKING:
    from flytekitplugins_rootcause.config import ElasticRootCause

#: Exit status when no error document could be written at all (1 is an uncaught exception, 2 a usage
#: error in click): the pod fails, and its log says which files and why. A pod that wrote its own
#: document exits 0 even if another file failed: a non-zero exit fails the PyTorchJob, and Flyte
#: reads no error document of a failed job.
WRITE_FAILED_EXIT_CODE = 3

#: Seconds the watchdog's last-resort writer gives its writes: the failure sink abandons it after
#: ``DEFAULT_SINK_TIMEOUT_S``, and a write given up on in time is still logged with its reason.
LAST_RESORT_DEADLINE_S = deadline_inside(DEFAULT_SINK_TIMEOUT_S)

#: Name of the error document inside flytekit's engine folder, before it is moved out.
STAGED_ERROR_FILE_NAME = ".rootcause-staged-error.pb"

_FLYTEKIT_COMMAND: click.Command = flytekit_entrypoint.flytekit_execute_command()

_CONFIG_MODULE = "flytekitplugins_rootcause.config"


@dataclasses.dataclass
class _LoadedTask:
    """The task, loaded once up front so its config can choose the error files.

    A load failure is kept and raised again when flytekit asks for the task, so flytekit reports it
    as it always does (a user error in the error document).
    """

    task: Any = None
    error: Exception | None = None

    @classmethod
    def from_loader(cls, load_task: Callable[[], Any]) -> _LoadedTask:
        try:
            return cls(task=load_task())
        except Exception as error:
            return cls(error=error)

    def load(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.task

    @property
    def root_cause_config(self) -> ElasticRootCause | None:
        """The task's ``ElasticRootCause`` config, if it has one.

        Looked up without importing the config module: that would import kfpytorch and torch into
        every run, plain tasks included. A task can only hold an ``ElasticRootCause`` once its module
        imported the class, so if the module is not loaded, the config is not one.
        """
        config_module = sys.modules.get(_CONFIG_MODULE)
        config = getattr(self.task, "task_config", None)
        if config_module is None or not isinstance(config, config_module.ElasticRootCause):
            return None
        return config


@dataclasses.dataclass
class _ErrorFileRouter:
    """Takes the staged error document out of flytekit's engine-folder upload and writes it our way.

    The staged bytes are flytekit's own serialization (code, kind and origin are flytekit's): they
    are written as they are, named from the plan the hooks made for the same exception
    (``planner.staged_plan()``), never parsed. Every other ``put_data`` call (outputs, decks, user
    data) goes to flytekit's own method.
    """

    put_data: Callable[..., Any]
    engine_dir: str
    worker: str
    planner: ErrorDocumentPlanner
    policy: ErrorFilePolicy
    filesystems: FilesystemSource
    #: how long a pod whose document is a victim's waits for one naming the root cause (``None``: not at all)
    root_cause_wait_s: float | None = None

    def __call__(self, local_path: Any, remote_path: str, is_multipart: bool = False, **kwargs: Any) -> Any:
        staged = os.path.join(self.engine_dir, STAGED_ERROR_FILE_NAME)
        if not (is_multipart and os.path.realpath(str(local_path)) == os.path.realpath(self.engine_dir)):
            return self.put_data(local_path, remote_path, is_multipart=is_multipart, **kwargs)
        if os.path.isfile(staged):
            with open(staged, "rb") as handle:
                document = handle.read()
            os.remove(staged)
            plan = self.planner.staged_plan()
            self._write(remote_path, document, plan)
            _FAILURE_DOCUMENTED.set()
        if not os.listdir(self.engine_dir):
            return remote_path  # flytekit would have uploaded only the error document
        return self.put_data(local_path, remote_path, is_multipart=is_multipart, **kwargs)

    def write_last_resort(self, prefix: str, error: BaseException) -> None:
        """For the agent watchdog: write this pod's error files for ``error`` before it exits, on the
        same road as flytekit's staged document (a victim's waits for the culprit's), within the
        time the failure sink gives its writer."""
        plan, document = last_resort_document(error, display_worker_name(self.worker))
        self._write(prefix, document, plan, deadline_s=LAST_RESORT_DEADLINE_S)

    def _write(self, prefix: str, document: bytes, plan: ErrorDocumentPlan | None, *,
               deadline_s: float | None = None) -> None:
        if self.root_cause_wait_s is not None and leaves_the_answer_to_another_pod(plan):
            wait_s = self.root_cause_wait_s if deadline_s is None else min(self.root_cause_wait_s, deadline_s / 2)
            _victim_writes(self, prefix, document, plan, wait_s, deadline_s=deadline_s)
            return
        _log_outcome(write_error_documents(prefix, document, self.worker, plan, self.policy, self.filesystems,
                                           deadline_s=deadline_s))


def _victim_writes(router: _ErrorFileRouter, prefix: str, document: bytes, plan: ErrorDocumentPlan | None,
                   wait_s: float, *, deadline_s: float | None = None) -> None:
    """Write a document that names only victims (or a failure the pods agreed came after another
    pod's) so that it never decides what the console shows.

    The console reads what the prefix holds when the first pod exits, with the earliest timestamp
    (aggregation) or ``error.pb`` alone: this pod's own file is written at once, but ``error.pb`` is
    left to the culprit's pod, and this pod waits (up to ``wait_s``) until a document that can name
    the root cause, and ``error.pb`` if it is to exist, are there. Only when none came does this
    pod create ``error.pb`` with its own document, so that a backend reading only that file finds one.
    """
    policy = router.policy
    own = dataclasses.replace(policy, error_pb_if_absent=False)
    if own.per_worker_files:
        _log_outcome(write_error_documents(prefix, document, router.worker, plan, own, router.filesystems,
                                           deadline_s=deadline_s))
    names = lambda: list_names(prefix, router.filesystems)  # noqa: E731
    awaited = plan.defers_to if plan is not None else None
    if not await_root_cause_document(names, bound_s=wait_s, with_error_pb=policy.error_pb_if_absent,
                                     from_worker=awaited) and policy.error_pb_if_absent:
        shared_only = ErrorFilePolicy(per_worker_files=False, error_pb_if_absent=True)
        _log_outcome(write_error_documents(prefix, document, router.worker, plan, shared_only, router.filesystems,
                                           deadline_s=deadline_s))


def _report_failures(failures: tuple[WriteFailure, ...]) -> None:
    """One line per file not written, on stderr (where a pod's log is read first), never a traceback."""
    for failure in failures:
        click.echo(f"{PATCHED_ENTRYPOINT}: {failure.describe()}", err=True)


def _log_outcome(outcome: WriteOutcome) -> None:
    if outcome.per_worker_path is not None:
        logger.info(f"Wrote error document {outcome.per_worker_path}")
    if outcome.shared_created:
        logger.info(f"Created {outcome.shared_path} (this pod's error is the first one there)")
    elif outcome.shared_created is False:
        logger.info(f"Left {outcome.shared_path} as it was: another pod's error was written there first")
    _report_failures(outcome.failures)


def _dispatch_execute(
    ctx: FlyteContext,
    load_task: Callable[[], Any],
    inputs_path: str,
    output_prefix: str,
    is_map_task: bool = False,
) -> Any:
    """flytekit's ``_dispatch_execute``, with the error document named, stamped and written by us."""
    loaded = _LoadedTask.from_loader(load_task)
    strategy = flytekit_entrypoint.get_one_of(*DIST_ERROR_STRATEGY_ENV_VARS)
    policy = decide_policy(strategy, loaded.root_cause_config)
    if loaded.root_cause_config is None:
        POD_STOP.release()  # no launch of ours will act on the kubelet's SIGTERM: Python's default again
    if policy.is_flytekit_default:
        return flytekit_entrypoint.dispatch_execute(ctx, loaded.load, inputs_path, output_prefix, is_map_task)

    worker = raw_worker_name(os.environ)
    document_worker = display_worker_name(worker)
    file_access = ctx.file_access
    planner = ErrorDocumentPlanner(
        document_worker,
        flytekit_message=flytekit_entrypoint.traceback_str,
        flytekit_timestamp=flytekit_entrypoint.container_error_timestamp,
    )
    router = _ErrorFileRouter(
        put_data=file_access.put_data,
        engine_dir=ctx.execution_state.engine_dir,
        worker=worker,
        planner=planner,
        policy=policy,
        filesystems=file_access,
        root_cause_wait_s=root_cause_wait_s(loaded.root_cause_config),
    )

    with (
        flytekit_entrypoint.error_document_hooks(
            error_file_name=lambda: STAGED_ERROR_FILE_NAME,
            worker_name=lambda: document_worker,
            error_timestamp=planner.error_timestamp,
            error_message=planner.error_message,
        ),
        flytekit_entrypoint.put_data_replaced(file_access, router),
        failure_sink(functools.partial(router.write_last_resort, output_prefix), destination=output_prefix),
    ):
        return flytekit_entrypoint.dispatch_execute(ctx, loaded.load, inputs_path, output_prefix, is_map_task)


#: Set once this pod's error document is written (the last thing the pod owes anyone): the pod exits 0.
_FAILURE_DOCUMENTED = threading.Event()


def _execute(**params: Any) -> None:
    """Run flytekit's ``pyflyte-execute`` callback with our ``_dispatch_execute`` in place."""
    try:
        with flytekit_entrypoint.dispatch_execute_replaced(_dispatch_execute):
            _FLYTEKIT_COMMAND.callback(**params)  # type: ignore[misc]
    except ErrorDocumentWriteError as error:
        _report_failures(error.failures)
        sys.exit(WRITE_FAILED_EXIT_CODE)
    if _FAILURE_DOCUMENTED.is_set():
        exit_without_teardown(0)  # flytekit's exit status for a task whose error document was written


execute_task_cmd = click.Command(
    name=PATCHED_ENTRYPOINT,
    params=list(_FLYTEKIT_COMMAND.params),
    callback=_execute,
    help="pyflyte-execute, writing one error document per worker (and error.pb only if absent).",
)
