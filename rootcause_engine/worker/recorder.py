"""Worker side: record an uncaught exception with a nanosecond time, ranks and host. torch's own
``ErrorHandler`` stamps failures with whole seconds, so two workers failing within one second look
alike. ``RootCauseErrorHandler`` keeps torch's file layout, so torch and upstream tools still read
it, and adds this plugin's fields under :data:`NAMESPACE`. ``RecordingTaskFunction`` wraps the user's
task function, so the handler runs in every worker without copying kfpytorch code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

from rootcause_core.collectives import CollectivePosition, positions_from_json
from rootcause_core.safe_text import (
    MAX_WORKER_ERROR_FILE_BYTES,
    MAX_WORKER_TEXT_BYTES,
    bounded_text,
    exception_summary,
    format_traceback,
    safe_line,
    safe_text,
)
from rootcause_core.timestamps import NS_PER_S
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.upstream.torch_worker import error_file_path
from rootcause_engine.worker.complete_files import write_complete
from rootcause_engine.worker.hang_probe import collective_positions_json
from rootcause_engine.worker.source_lines import restore_source_file, source_file_of

#: The one key under which this plugin's fields live in a torchelastic error file.
NAMESPACE = "rootcause"
#: Version of the fields under :data:`NAMESPACE`; bump when their meaning changes.
FORMAT_VERSION = 1
#: Name torch's own ``record`` writes to after ours has written the real error file (see
#: ``RootCauseErrorHandler.record_exception``).
TORCH_SHADOW_FILE_NAME = "torch-error.json"

def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class RecordedError:
    """What a worker recorded about its own failure (the namespaced part of the error file)."""

    message: str
    traceback: str
    timestamp_ns: int | None
    exception_type: str | None
    exception_mro: tuple[str, ...]
    recoverable: bool
    global_rank: int | None
    local_rank: int | None
    group_rank: int | None
    host: str
    worker: str
    pid: int | None
    #: The last collective this worker had entered per process group when it failed (Flight Recorder).
    collectives: tuple[CollectivePosition, ...] = ()
    #: the exception forbade a retry (:data:`RETRY_REFUSING_EXCEPTION_TYPES`)
    retry_refused: bool = False


class RootCauseErrorHandler(ErrorHandler):
    """torch's ``ErrorHandler`` with a nanosecond time and the worker's identity added."""

    def record_exception(self, e: BaseException) -> None:
        """Write the error file, then point torch's outer ``record`` at a shadow file.

        torch wraps every worker function in its own ``record``, which would overwrite this file
        with the whole-second version when the exception reaches it. Redirecting
        ``TORCHELASTIC_ERROR_FILE`` to a sibling keeps the directory the same, so kfpytorch's
        ``recoverable_error`` marker (written next to the error file) still lands where its agent
        looks, while the agent reads the richer file this method wrote.
        """
        path = error_file_path(self)
        if not path:
            return
        now_ns = time.time_ns()
        data = build_error_file(e, now_ns)
        write_complete(path, json.dumps(data))
        os.environ["TORCHELASTIC_ERROR_FILE"] = os.path.join(os.path.dirname(path), TORCH_SHADOW_FILE_NAME)


#: Exception classes that ask the orchestrator for a retry, by qualified name: a front-end's own
#: classes, named here so that recording a worker's failure imports no front-end (a worker of a
#: Flyte 2 task has no flytekit). ``tests/test_upstream_seams.py`` checks each name still resolves.
RECOVERABLE_EXCEPTION_TYPES: frozenset[str] = frozenset({"flytekit.exceptions.user.FlyteRecoverableException"})
#: Exception classes that forbid a retry, by qualified name, the same way: Flyte 2 retries every
#: error but these. Both facts are recorded; each front-end's rule reads the one it has
#: (``diagnosis.selection.RetryRule``).
RETRY_REFUSING_EXCEPTION_TYPES: frozenset[str] = frozenset({"flyte.errors.NonRecoverableError"})


def _is_one_of(e: BaseException, qualified_names: frozenset[str]) -> bool:
    return any(f"{cls.__module__}.{cls.__qualname__}" in qualified_names for cls in type(e).__mro__)


def is_recoverable_exception(e: BaseException) -> bool:
    """``e`` is (a subclass of) one of :data:`RECOVERABLE_EXCEPTION_TYPES`."""
    return _is_one_of(e, RECOVERABLE_EXCEPTION_TYPES)


def refuses_retry(e: BaseException) -> bool:
    """``e`` is (a subclass of) one of :data:`RETRY_REFUSING_EXCEPTION_TYPES`."""
    return _is_one_of(e, RETRY_REFUSING_EXCEPTION_TYPES)


def build_error_file(e: BaseException, timestamp_ns: int) -> dict[str, Any]:
    """The JSON document for ``e``: torch's layout plus this plugin's namespaced fields.

    The message (``Type: text``, even when ``__str__`` raises) and the traceback are each cut to
    ``MAX_WORKER_TEXT_BYTES`` (head and tail: the type and first line, the innermost frames), so the
    file stays under ``MAX_WORKER_ERROR_FILE_BYTES`` for any exception.
    """
    exc_type = type(e)
    return {
        "message": {
            "message": bounded_text(exception_summary(e), MAX_WORKER_TEXT_BYTES),
            "extraInfo": {
                "py_callstack": bounded_text(format_traceback(e), MAX_WORKER_TEXT_BYTES),
                "timestamp": str(timestamp_ns // NS_PER_S),
            },
        },
        NAMESPACE: {
            "version": FORMAT_VERSION,
            "timestamp_ns": timestamp_ns,
            "exception_type": safe_text(f"{exc_type.__module__}.{exc_type.__qualname__}"),
            "exception_mro": [safe_text(cls.__name__) for cls in exc_type.__mro__],
            "recoverable": is_recoverable_exception(e),
            "retry_refused": refuses_retry(e),
            "rank": _int_env("RANK"),
            "local_rank": _int_env("LOCAL_RANK"),
            "group_rank": _int_env("GROUP_RANK"),
            "host": safe_line(socket.gethostname()),
            "worker": safe_line(current_worker_name()),
            "pid": os.getpid(),
            "collectives": collective_positions_json(),
        },
    }


class WorkerErrorFileError(ValueError):
    """An error file exists but is not a torchelastic error document."""


def parse_error_file(text: str) -> RecordedError:
    """Parse an error file written by torch or by this plugin.

    Files written by torch alone (no namespaced key) parse too, with ``timestamp_ns`` left ``None``:
    torch's whole-second stamp is too coarse to order by, so the caller falls back to the observed
    death time. Every text comes back safe and bounded (``rootcause_core.safe_text``), whoever
    wrote the file.
    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise WorkerErrorFileError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or "message" not in data:
        raise WorkerErrorFileError("no 'message' key: not a torchelastic error file")
    body = data["message"]
    if isinstance(body, str):
        message, callstack = body, ""
    elif isinstance(body, dict):
        message = str(body.get("message", ""))
        extra = body.get("extraInfo") if isinstance(body.get("extraInfo"), dict) else {}
        callstack = str(extra.get("py_callstack", ""))
    else:
        raise WorkerErrorFileError("'message' is neither a string nor an object")
    ours = data.get(NAMESPACE) if isinstance(data.get(NAMESPACE), dict) else {}

    def opt_int(key: str) -> int | None:
        value = ours.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    mro = ours.get("exception_mro")
    exception_type = ours.get("exception_type")
    return RecordedError(
        message=bounded_text(message, MAX_WORKER_TEXT_BYTES),
        traceback=bounded_text(callstack, MAX_WORKER_TEXT_BYTES),
        timestamp_ns=opt_int("timestamp_ns"),
        exception_type=safe_text(exception_type) if isinstance(exception_type, str) else None,
        exception_mro=tuple(safe_text(str(name)) for name in mro) if isinstance(mro, list) else (),
        recoverable=ours.get("recoverable") is True,
        retry_refused=ours.get("retry_refused") is True,
        global_rank=opt_int("rank"),
        local_rank=opt_int("local_rank"),
        group_rank=opt_int("group_rank"),
        host=safe_line(str(ours.get("host", ""))),
        worker=safe_line(str(ours.get("worker", ""))),
        pid=opt_int("pid"),
        collectives=tuple(positions_from_json(ours.get("collectives"))),
    )


def read_error_file(path: str, max_bytes: int = MAX_WORKER_ERROR_FILE_BYTES) -> RecordedError | None:
    """Read a worker's error file; ``None`` when the worker wrote none (e.g. killed by a signal).

    An unreadable or foreign file is reported as a recorded error whose message says so, rather
    than raised: the agent must still report the failure, and must not lose the others.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _unreadable(f"error file {path} could not be read: {exc}")
    if len(raw) > max_bytes:
        return _unreadable(f"error file {path} is larger than {max_bytes} bytes")
    try:  # bytes that are not UTF-8 are escaped, not a reason to lose the file
        return parse_error_file(raw.decode("utf-8", errors="surrogateescape"))
    except WorkerErrorFileError as exc:
        return _unreadable(f"error file {path} is not a torchelastic error file: {exc}")


def _unreadable(message: str) -> RecordedError:
    return RecordedError(safe_text(message), "", None, None, (), False, None, None, None, "", "", None)


@dataclasses.dataclass
class RecordingTaskFunction:
    """The user's task function, recording any uncaught exception before it propagates.

    Instances are pickled (cloudpickle) into every worker by kfpytorch's ``spawn`` path, so they
    hold only the function and picklable settings. ``before_user_function`` runs in the worker
    first (the straggler pre-check hooks in there). ``source_file`` is the function's file, put back
    into its code after unpickling (:mod:`.source_lines`), so the report shows the line that raised.
    """

    function: Callable[..., Any]
    before_user_function: Callable[[], None] | None = None
    source_file: str | None = None

    def __post_init__(self) -> None:
        if self.source_file is None:
            self.source_file = source_file_of(self.function)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        restore_source_file(self.function, self.source_file)

    def __call__(self, **kwargs: Any) -> Any:
        handler = RootCauseErrorHandler()
        try:
            if self.before_user_function is not None:
                self.before_user_function()
            return self.function(**kwargs)
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                handler.record_exception(exit_)
            raise
        except BaseException as exc:
            handler.record_exception(exc)
            raise
