"""How the agent reaches into torch elastic and ``torch.multiprocessing`` (what it does there is
elsewhere). Torch keeps what the agent needs in private places that may move between releases. So
this module is the only one that knows *where* torch keeps things, and
:mod:`rootcause_engine.agent.launch_observer` decides what to do with them. It holds the launch's
patches, the wraps of one attempt's process context, and read-only accessors of that context. What
runs inside workers is in :mod:`.torch_worker`, so a worker does not import the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.multiprocessing import ProcessExitedException

from rootcause_engine.upstream import torch_worker
from rootcause_engine.upstream.patching import patched, wrap_attribute
from rootcause_engine.upstream.versions import Symbol, require

logger = logging.getLogger(__name__)

_AGENT = "torch.distributed.elastic.agent.server.local_elastic_agent"
_WORKER_API = "torch.distributed.elastic.agent.server.api"
_API = "torch.distributed.elastic.multiprocessing.api"
_SPAWN = "torch.multiprocessing.spawn"
_RDZV_UTILS = "torch.distributed.elastic.rendezvous.utils"
_DYNAMIC_RDZV = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"


def torch_symbol(module: str, path: str, why: str, *, instance_attribute: bool = False) -> Symbol:
    """A torch symbol the seam declares (the agent-side seam modules share this shorthand)."""
    return Symbol("torch", module, path, why, instance_attribute)


_torch = torch_symbol


_MATCHES_HOST = _torch(
    _RDZV_UTILS, "_matches_machine_hostname", "calls, to tell whether torch would host the store here"
)

_BOOTSTRAP_SERVER = _torch(
    _DYNAMIC_RDZV,
    "DynamicRendezvousHandler._create_tcp_store_server",
    "replaces for a launch, to create the workers' shared store elsewhere than on an agent thread",
)

SYMBOLS: tuple[Symbol, ...] = (
    _torch(_AGENT, "start_processes", "replaces for a launch, to observe every worker torch starts"),
    _torch(_AGENT, "LocalElasticAgent._rendezvous", "wraps for a launch, to time the rendezvous"),
    _torch(_AGENT, "LocalElasticAgent._exit_barrier", "wraps for a launch, to time the exit barrier"),
    *(
        _torch(_WORKER_API, path, "reads after a rendezvous, for the round and this pod's place in it",
               instance_attribute=True)
        for path in (
            "WorkerGroup.store",
            "WorkerGroup.group_rank",
            "WorkerGroup.group_world_size",
            "WorkerGroup.workers",
            "Worker.global_rank",
        )
    ),
    _torch(_API, "PContext.close", "wraps, to note the teardown start and apply the grace period"),
    _torch(_API, "PContext.pids", "calls, to watch every worker pid"),
    _torch(_API, "PContext.envs", "reads, for each worker's ranks and restart attempt", instance_attribute=True),
    _torch(_API, "PContext.error_files", "reads, for each worker's error file", instance_attribute=True),
    _torch(_API, "PContext.nprocs", "reads, to tell whether every return value arrived", instance_attribute=True),
    _torch(_API, "MultiprocessContext._pc", "reads, to wrap the join torch's poll calls", instance_attribute=True),
    _torch(
        _API, "MultiprocessContext._return_values", "reads, to tell whether workers returned", instance_attribute=True
    ),
    _torch(
        _API,
        "MultiprocessContext._worker_finished_event",
        "checks, to tell a function launch from a binary one",
        instance_attribute=True,
    ),
    _torch(
        _API, "SubprocessContext.subprocess_handlers", "reads, for a binary worker's exit code", instance_attribute=True
    ),
    _torch(
        "torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler",
        "SubprocessHandler.proc",
        "reads, for a binary worker's exit code",
        instance_attribute=True,
    ),
    _torch(_SPAWN, "ProcessContext.join", "wraps, to tear down under the configured grace instead of 30 s"),
    _torch(
        _SPAWN, "ProcessContext.sentinels", "reads and reorders, so torch reports the failed worker",
        instance_attribute=True,
    ),
    _torch(_SPAWN, "ProcessContext.processes", "reads, for worker pids and exit codes", instance_attribute=True),
    _torch(_SPAWN, "ProcessExitedException", "raises, for failures torch's join would miss"),
    _MATCHES_HOST,
    _BOOTSTRAP_SERVER,
    _torch(_API, "_terminate_process_handler", "replaces, to note the kubelet's SIGTERM before torch acts on it"),
    _torch(_API, "SignalException", "raises, as torch's own handler does, to end the launch on a SIGTERM"),
)


def _check() -> None:
    """This module's symbols, and the workers' (:mod:`.torch_worker`): checked before any worker starts."""
    require(SYMBOLS + torch_worker.SYMBOLS)


def endpoint_is_this_machine(host: str) -> bool:
    """Whether torch's c10d rendezvous would try to host its store here for endpoint host ``host``.

    torch's own test (the host is ``localhost``, a loopback address, or one of this machine's names
    and addresses), so the agent's decision never differs from torch's.
    """
    require((_MATCHES_HOST,))
    from torch.distributed.elastic.rendezvous import utils

    return bool(utils._matches_machine_hostname(host))


@contextlib.contextmanager
def patch_bootstrap_store_server(create: Callable[[Callable[[str, int], Any], str, int], Any]) -> Iterator[None]:
    """For the block, the workers' shared store server is ``create(torch_create, master_addr, master_port)``.

    Since torch 2.4 the c10d rendezvous gives the workers a second ``TCPStore`` (their
    ``MASTER_ADDR``/``MASTER_PORT``), created by the agent that got rank 0 in the round, with
    ``DynamicRendezvousHandler._create_tcp_store_server``: a server on a thread of that agent, unless
    ``create`` puts it elsewhere. torch keeps what ``create`` returns and reads its ``port``.
    """
    require((_BOOTSTRAP_SERVER,))
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    handler_class = dynamic_rendezvous.DynamicRendezvousHandler
    original = handler_class._create_tcp_store_server

    def create_server(handler: Any, master_addr: str, master_port: int) -> Any:
        return create(lambda addr, port: original(handler, addr, port), master_addr, master_port)

    with patched(handler_class, _create_tcp_store_server=create_server):
        yield


# --- launch-scoped patches (checked) -------------------------------------------------------------


def signal_exception(signum: int) -> BaseException:
    """The exception torch's own termination handler raises for ``signum`` (its agent shuts the
    workers down on it, and its launch re-raises it)."""
    from torch.distributed.elastic.multiprocessing import api

    sigval = signal.Signals(signum)
    return api.SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)


@contextlib.contextmanager
def patch_termination_handler(on_sigterm: Callable[[int, Any], None]) -> Iterator[None]:
    """For the block, the handler torch installs for its termination signals (when it starts workers)
    sends SIGTERM to ``on_sigterm`` and every other signal to torch's own handler.

    ``PContext.start`` installs ``_terminate_process_handler`` as a global of its module on every
    attempt, so replacing it there covers every attempt of the launch.
    """
    _check()
    from torch.distributed.elastic.multiprocessing import api

    original = api._terminate_process_handler

    def handler(signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM:
            on_sigterm(signum, frame)
        else:
            original(signum, frame)

    with patched(api, _terminate_process_handler=handler):
        yield


@contextlib.contextmanager
def patch_start_processes(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """For the block, the agent starts each attempt's workers with ``wrap(start_processes)``.

    ``LocalElasticAgent`` looks ``start_processes`` up as a global of its module on every attempt,
    so replacing it there (and restoring it after) covers function and binary launches alike. An
    elastic launch runs once per agent process, so no other launch can see the replacement.
    """
    _check()
    with patched(local_elastic_agent, start_processes=wrap(local_elastic_agent.start_processes)):
        yield


def _bracketed(method: Callable[..., Any], note: Callable[[bool], None]) -> Callable[..., Any]:
    """``method`` with ``note(True)`` before it and ``note(False)`` after it, however it ends."""

    def bracketed(agent: Any, *args: Any, **kwargs: Any) -> Any:
        note(True)
        try:
            return method(agent, *args, **kwargs)
        finally:
            note(False)

    return bracketed


@dataclasses.dataclass(frozen=True)
class JoinedRound:
    """What a finished rendezvous gave this agent: the round's store (scoped to the round by torch's
    c10d handler), this pod's group rank, the pod count, and the global ranks of its workers."""

    store: Any
    group_rank: int
    group_world_size: int
    global_ranks: tuple[int, ...]


def _joined_round(worker_group: Any) -> JoinedRound:
    return JoinedRound(
        store=worker_group.store,
        group_rank=int(worker_group.group_rank),
        group_world_size=int(worker_group.group_world_size),
        global_ranks=tuple(int(w.global_rank) for w in worker_group.workers),
    )


def _announcing_join(method: Callable[..., Any], after: Callable[[JoinedRound], None]) -> Callable[..., Any]:
    """``_rendezvous`` that hands ``after`` the round it joined (never failing the rendezvous itself)."""

    def rendezvous(agent: Any, worker_group: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(agent, worker_group, *args, **kwargs)
        try:
            joined = _joined_round(worker_group)
        except (AttributeError, TypeError, ValueError):
            logger.warning("could not read the rendezvous round from torch's worker group", exc_info=True)
        else:
            after(joined)
        return result

    return rendezvous


@contextlib.contextmanager
def patch_agent_phases(
    *,
    on_rendezvous: Callable[[bool], None],
    on_exit_barrier: Callable[[bool], None],
    after_rendezvous: Callable[[JoinedRound], None] | None = None,
) -> Iterator[None]:
    """For the block, ``on_<phase>(True)`` / ``(False)`` is called as the agent enters / leaves that phase,
    and ``after_rendezvous`` with each round the agent joins.

    The rendezvous and the exit barrier are methods torch's ``SimpleElasticAgent`` defines and
    ``LocalElasticAgent`` inherits; they are set on ``LocalElasticAgent`` for the block and deleted
    from it afterwards, so the inherited ones show through again.
    """
    _check()
    agent_class = local_elastic_agent.LocalElasticAgent
    rendezvous = agent_class._rendezvous
    if after_rendezvous is not None:
        rendezvous = _announcing_join(rendezvous, after_rendezvous)
    with patched(
        agent_class,
        _rendezvous=_bracketed(rendezvous, on_rendezvous),
        _exit_barrier=_bracketed(agent_class._exit_barrier, on_exit_barrier),
    ):
        yield


# --- one attempt's process context (``PContext``) --------------------------------------------------


def worker_envs(pcontext: Any) -> dict[int, dict[str, str]]:
    """Each local rank's environment as torch configured it (ranks, restart count); ``{}`` if unknown."""
    return getattr(pcontext, "envs", {}) or {}


def worker_error_files(pcontext: Any) -> dict[int, str]:
    """Each local rank's ``TORCHELASTIC_ERROR_FILE``; ``{}`` if unknown."""
    return getattr(pcontext, "error_files", {}) or {}


def worker_pids(pcontext: Any) -> dict[int, int]:
    """Each local rank's pid."""
    return pcontext.pids()


def worker_count(pcontext: Any) -> int:
    """How many workers the context started (``nprocs``); -1 if unknown."""
    return getattr(pcontext, "nprocs", -1)


def collected_return_values(pcontext: Any) -> dict[int, Any] | None:
    """The return values torch's poll has collected so far; ``None`` unless it is a function launch.

    Read without a lock: ``_poll`` fills ``_return_values`` and only then sets the workers'
    "finished" event. (``Event.is_set`` would take a lock shared with the workers, which a worker
    killed inside ``Event.wait`` can leave held forever.) A binary launch has no "finished" event.
    """
    collected = getattr(pcontext, "_return_values", None)
    if not isinstance(collected, dict) or not hasattr(pcontext, "_worker_finished_event"):
        return None
    return collected


def wrap_close(pcontext: Any, wrap: Callable[[Callable[..., None]], Callable[..., None]]) -> None:
    """Replace the context's ``close(death_sig, timeout)`` by ``wrap(close)`` for the attempt."""
    wrap_attribute(pcontext, "close", wrap)


def binary_worker_returncode(pcontext: Any, local_rank: int) -> int | None:
    """The return code of a binary launch's worker process (``Popen.returncode``); ``None`` if unknown."""
    handlers = getattr(pcontext, "subprocess_handlers", None) or {}
    handler = handlers.get(local_rank) if isinstance(handlers, dict) else None
    proc = getattr(handler, "proc", None)
    return getattr(proc, "returncode", None)


# --- the function launch's ``torch.multiprocessing.ProcessContext`` --------------------------------


def process_context_of(pcontext: Any) -> Any | None:
    """The ``torch.multiprocessing`` ``ProcessContext`` a function launch polls; ``None`` for a binary launch."""
    return getattr(pcontext, "_pc", None)


def joinable_process_context(pcontext: Any) -> Any | None:
    """:func:`process_context_of`, if it is one whose ``join`` waits on worker sentinels (else ``None``)."""
    process_context = process_context_of(pcontext)
    if process_context is None or not hasattr(process_context, "sentinels"):
        return None
    return process_context


def function_worker_processes(pcontext: Any) -> list[Any] | None:
    """The ``multiprocessing`` processes of a function launch, by local rank; ``None`` for a binary launch."""
    return getattr(process_context_of(pcontext), "processes", None)


def processes(process_context: Any) -> list[Any]:
    """The ``multiprocessing`` processes of a ``ProcessContext``, by local rank."""
    return process_context.processes


def live_sentinels(process_context: Any) -> dict[Any, int]:
    """Sentinel -> local rank of the workers torch's join has not collected yet."""
    return process_context.sentinels


def set_live_sentinels(process_context: Any, sentinels: dict[Any, int]) -> None:
    """Replace what torch's join will wait on and report (its first failed sentinel is the one reported)."""
    process_context.sentinels = sentinels


def wrap_join(process_context: Any, wrap: Callable[[Callable[..., bool]], Callable[..., bool]]) -> None:
    """Replace the ``ProcessContext``'s ``join(timeout, grace_period)`` by ``wrap(join)`` for the attempt."""
    wrap_attribute(process_context, "join", wrap)


def process_exited_exception(message: str, *, index: int, pid: int, exit_code: int) -> Exception:
    """torch's ``ProcessExitedException`` for worker ``index``: the failure torch's poll knows how to report."""
    return ProcessExitedException(message, error_index=index, error_pid=pid, exit_code=exit_code)

