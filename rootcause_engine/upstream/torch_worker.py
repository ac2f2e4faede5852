"""How a training worker reaches into torch: its error file's path, the default collective timeout, and
its Flight Recorder.

Apart from :mod:`.torch_elastic` so that a worker does not import torch's agent modules (workers
must stay cheap to start). Both symbols are checked by the agent before it starts any worker
(:func:`.torch_elastic.patch_start_processes`; workers run the agent's installation), because
:func:`error_file_path` runs on the worker's failure path, where a new exception would hide the
user's. :func:`set_default_collective_timeout` also checks them itself: it runs before the user's
function, where failing is clear, and also without an agent (tests, ``pyflyte run`` locally).
"""

from __future__ import annotations

from datetime import timedelta

from rootcause_engine.upstream.versions import Symbol, require

_C10D = "torch.distributed.distributed_c10d"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol(
        "torch",
        "torch.distributed.elastic.multiprocessing.errors.error_handler",
        "ErrorHandler._get_error_file_path",
        "calls in each worker, for the path of its error file",
    ),
    Symbol("torch", _C10D, "default_pg_timeout", "sets in each worker, when collective_timeout_s is set"),
    Symbol("torch", _C10D, "_abort_process_group", "calls, to leave an NCCL world under soft restarts"),
    Symbol("torch", _C10D, "default_pg_nccl_timeout", "sets in each worker, when collective_timeout_s is set"),
    Symbol(
        "torch",
        "torch._C._distributed_c10d",
        "_dump_fr_trace",
        "calls in a worker whose peers timed out, for the collectives it entered (Flight Recorder)",
    ),
)

#: The Flight Recorder's ring size (entries per process); torch's own variable, for gloo and NCCL.
FLIGHT_RECORDER_BUFFER_VAR = "TORCH_FR_BUFFER_SIZE"
#: Its older, NCCL-only name, which torch still reads when the new one is unset.
FLIGHT_RECORDER_NCCL_BUFFER_VAR = "TORCH_NCCL_TRACE_BUFFER_SIZE"


def error_file_path(handler: object) -> str | None:
    """Where torch's ``ErrorHandler`` writes this worker's error file (``TORCHELASTIC_ERROR_FILE``), if set.

    ``handler`` is a torch ``ErrorHandler`` (or a subclass): its private ``_get_error_file_path``
    is what torch's own ``record_exception`` uses, so both agree on the path.
    """
    return handler._get_error_file_path()  # type: ignore[attr-defined]


def worker_error_file() -> str | None:
    """This worker's torch error file, as torch's ``ErrorHandler`` finds it (before any redirect)."""
    from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

    return error_file_path(ErrorHandler())


def set_default_collective_timeout(seconds: float) -> None:
    """Make ``seconds`` the timeout ``init_process_group``/``new_group`` use when given none.

    torch reads the defaults from these module globals when a group is created without a timeout
    (``_get_default_timeout``); setting them in the worker, before the user's function, reaches
    groups created by libraries the user cannot pass a timeout to. The NCCL default is only set
    where torch has one (``None`` in builds without NCCL).
    """
    require(SYMBOLS)
    from torch.distributed import distributed_c10d

    timeout = timedelta(seconds=seconds)
    distributed_c10d.default_pg_timeout = timeout
    if distributed_c10d.default_pg_nccl_timeout is not None:
        distributed_c10d.default_pg_nccl_timeout = timeout


def flight_recorder_entries() -> list[dict[str, object]] | None:
    """This process's Flight Recorder entries (oldest first), ``None`` where torch cannot give them.

    torch records every collective a process group of this process *enters* (gloo and NCCL alike in
    torch 2.13) when ``TORCH_FR_BUFFER_SIZE`` was set before the group was made; the dump is the
    pickle torch's ``fr_trace`` analyzer reads. Each entry has ``pg_id``, ``collective_seq_id``,
    ``profiling_name`` (e.g. ``gloo:all_reduce``) and ``time_created_ns``. Never raises: it runs on
    a failure path and in a signal handler.
    """
    try:
        import pickle

        from torch._C import _distributed_c10d

        dump = pickle.loads(_distributed_c10d._dump_fr_trace(True, False, False))
        entries = dump.get("entries", []) if isinstance(dump, dict) else []
        return [entry for entry in entries if isinstance(entry, dict)]
    except Exception:
        return None


def abort_process_groups() -> None:
    """Abort every NCCL communicator of this process (torch's communicator abort): a collective stuck on a
    failed peer returns, and the process lives on to join the next world (soft restarts)."""
    require(SYMBOLS)
    import torch.distributed.distributed_c10d as c10d

    c10d._abort_process_group()
