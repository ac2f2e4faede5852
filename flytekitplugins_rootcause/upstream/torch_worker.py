"""How a training worker reaches into torch: its error file's path and the default collective timeout.

Apart from :mod:`.torch_elastic` so that a worker does not import torch's agent modules (workers
must stay cheap to start). Both symbols are checked by the agent before it starts any worker
(:func:`.torch_elastic.patch_start_processes`; workers run the agent's installation), because
:func:`error_file_path` runs on the worker's failure path, where a new exception would hide the
user's. :func:`set_default_collective_timeout` also checks them itself: it runs before the user's
function, where failing is clear, and also without an agent (tests, ``pyflyte run`` locally).
"""

from __future__ import annotations

from datetime import timedelta

from flytekitplugins_rootcause.upstream.versions import Symbol, require

_C10D = "torch.distributed.distributed_c10d"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol(
        "torch",
        "torch.distributed.elastic.multiprocessing.errors.error_handler",
        "ErrorHandler._get_error_file_path",
        "calls in each worker, for the path of its error file",
    ),
    Symbol("torch", _C10D, "default_pg_timeout", "sets in each worker, when collective_timeout_s is set"),
    Symbol("torch", _C10D, "default_pg_nccl_timeout", "sets in each worker, when collective_timeout_s is set"),
)


def error_file_path(handler: object) -> str | None:
    """Where torch's ``ErrorHandler`` writes this worker's error file (``TORCHELASTIC_ERROR_FILE``), if set.

    ``handler`` is a torch ``ErrorHandler`` (or a subclass): its private ``_get_error_file_path``
    is what torch's own ``record_exception`` uses, so both agree on the path.
    """
    return handler._get_error_file_path()  # type: ignore[attr-defined]


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
