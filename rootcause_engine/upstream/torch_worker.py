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

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from rootcause_engine.upstream.patching import wrap_attribute
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
    *(
        Symbol("torch", _C10D, name, "wraps in each worker, for the peer a point-to-point call waits for")
        for name in ("send", "recv")
    ),
    *(
        Symbol("torch", _C10D, name, "wraps in soft-restart workers: a group made with the RFC's API alone is "
               "left as reinitialize leaves it")
        for name in ("init_process_group", "destroy_process_group")
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
    """This process's Flight Recorder entries (each recorder's oldest first), ``None`` where torch cannot give them.

    torch records every collective a process group of this process *enters* (gloo and NCCL alike in
    torch 2.13) when ``TORCH_FR_BUFFER_SIZE`` was set before the group was made (CUDA builds record
    NCCL's by default); the dump is the pickle torch's ``fr_trace`` analyzer reads. A CUDA build
    keeps NCCL's recorder apart: ``_dump_fr_trace`` returns none of its entries, its own
    ``_dump_nccl_trace`` (absent from CPU builds, so not a required symbol) returns them; both are read.
    Each entry has ``pg_id``, ``collective_seq_id``,
    ``profiling_name`` (e.g. ``gloo:all_reduce``) and ``time_created_ns``. Never raises: it runs on
    a failure path and in a signal handler.
    """
    entries: list[dict[str, object]] = []
    answered = False
    for dump in _flight_recorder_dumps(with_entries=True):
        answered = True
        found = dump.get("entries", []) if isinstance(dump, dict) else []
        entries.extend(entry for entry in found if isinstance(entry, dict))
    return entries if answered else None


def _flight_recorder_dumps(*, with_entries: bool) -> Iterator[object]:
    """Each Flight Recorder dump this process can give, unpickled: the recorder of gloo (and of every
    backend, where torch has one for all) and NCCL's own, which torch keeps apart in CUDA builds and
    dumps with its own call (absent from CPU builds). A dump that fails is skipped; never raises."""
    import pickle

    try:
        from torch._C import _distributed_c10d
    except Exception:
        return
    for dump_name in ("_dump_fr_trace", "_dump_nccl_trace"):
        dump_call = getattr(_distributed_c10d, dump_name, None)
        if dump_call is None:
            continue
        try:
            dump = pickle.loads(dump_call(with_entries, False, False))
        except Exception:
            continue
        yield dump


def flight_recorder_status() -> dict[str, tuple[int, int]] | None:
    """Per process group of this process (its Flight Recorder id, ``"0"`` for the default group):
    (the number of the last collective it entered, of the last one that completed); ``None`` where
    torch cannot say. A group this process is no member of is absent.

    Why not :func:`flight_recorder_entries`: the dump without its entries is torch's ``pg_status``
    alone, about 10 microseconds where the full ring of 2000 entries takes some 40 ms of CPU, so it
    can be read every few seconds in a healthy worker (``worker.progress_beacon``). torch keeps it
    for gloo and NCCL groups alike, even with the ring disabled. Never raises.
    """
    status: dict[str, tuple[int, int]] = {}
    answered = False
    for dump in _flight_recorder_dumps(with_entries=False):
        try:
            groups = (dump.get("pg_status") or {}) if isinstance(dump, dict) else {}
            answered = True
            for pg, value in groups.items():
                entered = int(value.get("last_enqueued_collective", -1))
                completed = int(value.get("last_completed_collective", -1))
                known = status.get(str(pg), (-1, -1))
                status[str(pg)] = (max(known[0], entered), max(known[1], completed))
        except Exception:
            continue
    return status if answered else None


def abort_process_groups() -> None:
    """Abort every NCCL communicator of this process (torch's communicator abort): a collective stuck on a
    failed peer returns, and the process lives on to join the next world (soft restarts)."""
    require(SYMBOLS)
    import torch.distributed.distributed_c10d as c10d

    c10d._abort_process_group()


#: torch.distributed's blocking point-to-point calls: name -> (its peer argument, that argument's
#: group-rank form). Their non-blocking forms (isend, irecv, ``batch_isend_irecv``) are left alone:
#: torch compares those by identity (``P2POp``, ``batch_isend_irecv``), so a wrapped one would break
#: a caller that bound the original before the wrap.
POINT_TO_POINT_CALLS: dict[str, tuple[str, str]] = {"send": ("dst", "group_dst"), "recv": ("src", "group_src")}
#: Marks a call this module already wraps (installing twice must not wrap twice).
_OBSERVED = "__rootcause_point_to_point__"

#: Called as a point-to-point call starts: (operation, the peer's global rank if known, the process
#: group's name); returns what to call when the call returned.
PointToPointObserver = Callable[[str, "int | None", str], Callable[[], None]]


def observe_point_to_point(observer: PointToPointObserver) -> None:
    """Have every later ``torch.distributed`` send and recv of this process tell ``observer`` when
    it starts and when it returns, under both names a caller reaches them by
    (``torch.distributed.send`` and ``distributed_c10d.send``). For good: a worker process lives as
    long as the observation is wanted.

    Why: gloo's Flight Recorder records no point-to-point call, so a rank that times out in a recv
    could not otherwise say whom it waited for. Any error of the observer's is swallowed so that the
    user's call always runs. A name bound before this ran (``from torch.distributed import send``)
    keeps the unobserved function.
    """
    from torch.distributed import distributed_c10d

    for name, (peer_argument, group_peer_argument) in POINT_TO_POINT_CALLS.items():
        original = getattr(distributed_c10d, name)
        if getattr(original, _OBSERVED, False):
            continue
        _replace_under_both_names(name, original, _observed_call(name, original, peer_argument, group_peer_argument,
                                                                 observer))


def _observed_call(
    name: str,
    original: Callable[..., Any],
    peer_argument: str,
    group_peer_argument: str,
    observer: PointToPointObserver,
) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def observed(*args: Any, **kwargs: Any) -> Any:
        returned: Callable[[], None] | None = None
        try:
            bound = signature.bind(*args, **kwargs)
            group = bound.arguments.get("group")
            peer = bound.arguments.get(peer_argument)
            if peer is None and bound.arguments.get(group_peer_argument) is not None and group is not None:
                from torch.distributed import distributed_c10d

                peer = distributed_c10d.get_global_rank(group, bound.arguments[group_peer_argument])
            group_name = str(getattr(group, "group_name", "0")) if group is not None else "0"
            returned = observer(name, peer if isinstance(peer, int) else None, group_name)
        except Exception:
            returned = None
        result = original(*args, **kwargs)
        if returned is not None:
            with contextlib.suppress(Exception):
                returned()
        return result

    setattr(observed, _OBSERVED, True)
    return observed


_WRAPPED_LIFECYCLE = "_rootcause_group_lifecycle"


def wrap_default_group_lifecycle(
    around_init: Callable[[Callable[[], None]], None], before_destroy: Callable[[], None]
) -> None:
    """Route this process's ``init_process_group`` and ``destroy_process_group`` (of the default
    group) through the given callables, under both names a caller reaches them by. For good, once
    per process. ``around_init(init)`` must call ``init()`` (it sees what the call opened);
    ``before_destroy()`` runs before the default group is destroyed. A name bound before this ran
    (``from torch.distributed import init_process_group``) keeps torch's own function.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    init, destroy = distributed_c10d.init_process_group, distributed_c10d.destroy_process_group
    if getattr(init, _WRAPPED_LIFECYCLE, False):
        return

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> None:
        around_init(lambda: init(*args, **kwargs))

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> None:
        if group is None or group is distributed_c10d.GroupMember.WORLD:
            before_destroy()
            if not dist.is_initialized():
                return  # leaving destroyed it already (NCCL's communicator abort removes every group)
        destroy(group)

    for wrapper, original in ((init_process_group, init), (destroy_process_group, destroy)):
        setattr(wrapper, _WRAPPED_LIFECYCLE, True)
        _replace_under_both_names(original.__name__, original, wrapper)


def _replace_under_both_names(name: str, original: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """Put ``wrapper`` where a caller finds ``original``: ``torch.distributed.<name>`` and
    ``distributed_c10d.<name>`` (each only where it still is ``original``)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for module in (distributed_c10d, dist):
        if getattr(module, name, None) is original:
            wrap_attribute(module, name, lambda _original: wrapper)
