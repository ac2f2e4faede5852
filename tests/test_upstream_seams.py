"""The seams to upstream internals: the engine's (``rootcause_engine/upstream/``: torch) and the
flytekit front-end's (``flytekitplugins_rootcause/upstream/``: flytekit, kfpytorch).

- one smoke test per symbol a seam module declares (it exists, and is what we use it as: callable,
  an attribute on real objects, a signature that takes the arguments we pass), and a test that no
  declared symbol goes without one;
- the version check: the clear error for an unsupported version and for a missing symbol;
- the patching helper: exact restore of module, class and instance attributes, also on errors;
- a scan of the package for upstream attribute writes, private reads and ``setattr`` outside the seam.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import logging
import os
import pkgutil
import signal
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import flytekitplugins_rootcause
import rootcause_engine
from flytekitplugins_rootcause import upstream as front_end_seam
from rootcause_engine import upstream as engine_seam
from rootcause_engine.upstream import versions
from rootcause_engine.upstream.patching import patched, wrap_attribute
from rootcause_engine.upstream.versions import (
    Symbol,
    UnsupportedUpstreamError,
    VerifiedRange,
    release_of,
)
from testbed.gloo_scripts import FLIGHT_RECORDER_EXPECTED, flight_recorder_script, recorded_position

#: (package folder, its seam folder) for the engine and the flytekit front-end.
PACKAGE_DIRS = tuple(
    (Path(package.__file__).resolve().parent, Path(package.__file__).resolve().parent / "upstream")
    for package in (rootcause_engine, flytekitplugins_rootcause)
)
SEAMS = (engine_seam, front_end_seam)
UPSTREAM_PACKAGES = ("torch", "flytekit", "flytekitplugins")


def seam_modules() -> list[types.ModuleType]:
    """Every module of the seam package (imported)."""
    return [
        importlib.import_module(f"{seam.__name__}.{info.name}")
        for seam in SEAMS
        for info in pkgutil.iter_modules(seam.__path__)
    ]


def all_symbols() -> list[Symbol]:
    return [symbol for module in seam_modules() for symbol in getattr(module, "SYMBOLS", ())]


def resolve(qualified_name: str) -> Any:
    """The object a dotted name denotes: the longest importable module prefix, then attributes."""
    parts = qualified_name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            value = getattr(value, part)
        return value
    raise ImportError(qualified_name)


def parameter_names(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    """Each test sees the checks undone, so a simulated upstream never leaks into another test."""
    versions.forget_checks()
    yield
    versions.forget_checks()


# --- real torch objects, for the attributes torch sets in constructors ---------------------------------


def _return_seven() -> int:
    return 7


def _elastic_body() -> None:
    """The function of the kfpytorch task built in the ``_task_function`` smoke test."""


@pytest.fixture(scope="module")
def function_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A finished one-worker function launch, as torch's agent starts it (fork: no interpreter start-up)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes

    pcontext = start_processes(
        name="seam",
        entrypoint=_return_seven,
        args={0: ()},
        envs={0: {"RANK": "3", "TORCHELASTIC_RESTART_COUNT": "0"}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path_factory.mktemp("function_logs"))),
        start_method="fork",
    )
    result = pcontext.wait(timeout=60, period=0.05)
    assert result is not None and not result.is_failed()
    yield pcontext
    pcontext.close()


@pytest.fixture(scope="module")
def binary_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A finished one-worker binary launch (``/bin/true``)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes

    pcontext = start_processes(
        name="seam",
        entrypoint="/bin/true",
        args={0: ()},
        envs={0: {"RANK": "0"}},
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path_factory.mktemp("binary_logs"))),
    )
    assert pcontext.wait(timeout=60, period=0.05) is not None
    yield pcontext
    pcontext.close()


@pytest.fixture()
def process_context() -> Iterator[Any]:
    """A ``torch.multiprocessing`` ``ProcessContext`` with one finished worker, not joined yet."""
    import torch.multiprocessing as torch_mp

    context = torch_mp.start_processes(_exit_quietly_with_index, nprocs=1, join=False, start_method="fork")
    context.processes[0].join(timeout=60)
    yield context
    for process in context.processes:
        process.join(timeout=60)


def _exit_quietly_with_index(index: int) -> None:
    pass


# --- one smoke test per symbol ---------------------------------------------------------------------

AGENT = "torch.distributed.elastic.agent.server.local_elastic_agent"
API = "torch.distributed.elastic.multiprocessing.api"
SPAWN = "torch.multiprocessing.spawn"
ENTRYPOINT = "flytekit.bin.entrypoint"
KFPYTORCH = "flytekitplugins.kfpytorch.task"
WORKER_API = "torch.distributed.elastic.agent.server.api"


def _start_processes(_: Any) -> None:
    from torch.distributed.elastic.multiprocessing import start_processes

    # The agent calls the global with keywords; our replacement passes them through unchanged.
    assert resolve(f"{AGENT}.start_processes") is start_processes
    assert {"name", "entrypoint", "args", "envs", "logs_specs", "start_method"} <= set(parameter_names(start_processes))


def _rendezvous(_: Any) -> None:
    assert parameter_names(resolve(f"{AGENT}.LocalElasticAgent._rendezvous"))[0] == "self"


def _worker_group(_: Any) -> None:
    # what ``_rendezvous`` fills in, read back by ``torch_elastic.JoinedRound`` after it returns
    from torch.distributed.elastic.agent.server.api import Worker, WorkerGroup, WorkerSpec

    spec = WorkerSpec(role="trainer", local_world_size=2, rdzv_handler=object(), entrypoint="true")  # type: ignore[arg-type]
    group = WorkerGroup(spec)
    assert {"store", "group_rank", "group_world_size", "workers"} <= set(group.__slots__)
    group.store, group.group_rank, group.group_world_size = object(), 1, 3
    for index, worker in enumerate(group.workers):
        assert isinstance(worker, Worker)
        worker.global_rank = 2 + index
    from rootcause_engine.upstream.torch_elastic import _joined_round

    joined = _joined_round(group)
    assert (joined.group_rank, joined.group_world_size, joined.global_ranks) == (1, 3, (2, 3))


def _exit_barrier(_: Any) -> None:
    assert parameter_names(resolve(f"{AGENT}.LocalElasticAgent._exit_barrier")) == ["self"]


def _close(contexts: Any) -> None:
    # torch calls ``close(death_sig, timeout)`` and ``close()``; the wrapper has the same parameters.
    close = resolve(f"{API}.PContext.close")
    assert parameter_names(close) == ["self", "death_sig", "timeout"]
    inspect.signature(close).bind(contexts["function"], signal.SIGTERM, 5)


def _pids(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    pids = torch_elastic.worker_pids(contexts["function"])
    assert list(pids) == [0] and pids[0] > 0


def _envs(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    assert torch_elastic.worker_envs(contexts["function"])[0]["RANK"] == "3"
    assert torch_elastic.worker_envs(object()) == {}


def _error_files(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    assert torch_elastic.worker_error_files(contexts["function"])[0].endswith("error.json")


def _nprocs(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    assert torch_elastic.worker_count(contexts["function"]) == 1
    assert torch_elastic.worker_count(object()) == -1


def _pc(contexts: Any) -> None:
    from torch.multiprocessing import ProcessContext

    from rootcause_engine.upstream import torch_elastic

    assert isinstance(torch_elastic.process_context_of(contexts["function"]), ProcessContext)
    assert torch_elastic.joinable_process_context(contexts["function"]) is not None
    assert torch_elastic.process_context_of(contexts["binary"]) is None
    assert torch_elastic.joinable_process_context(contexts["binary"]) is None


def _return_values(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    assert torch_elastic.collected_return_values(contexts["function"]) == {0: 7}
    assert torch_elastic.collected_return_values(contexts["binary"]) is None


def _worker_finished_event(contexts: Any) -> None:
    assert hasattr(contexts["function"], "_worker_finished_event")
    assert not hasattr(contexts["binary"], "_worker_finished_event")  # how a binary launch is told apart


def _subprocess_handlers(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    assert set(contexts["binary"].subprocess_handlers) == {0}
    assert torch_elastic.binary_worker_returncode(contexts["binary"], 0) == 0
    assert torch_elastic.binary_worker_returncode(contexts["function"], 0) is None


def _proc(contexts: Any) -> None:
    assert contexts["binary"].subprocess_handlers[0].proc.returncode == 0


def _join(contexts: Any) -> None:
    # torch's poll calls ``join(-1)`` and ``join()``; the wrapper has the same parameters and calls
    # the original positionally with both.
    join = resolve(f"{SPAWN}.ProcessContext.join")
    assert parameter_names(join) == ["self", "timeout", "grace_period"]
    context = contexts["process_context"]
    from rootcause_engine.upstream import torch_elastic

    calls: list[tuple[Any, ...]] = []

    def wrap(original: Callable[..., bool]) -> Callable[..., bool]:
        def join(timeout: float | None = None, grace_period: float | None = None) -> bool:
            calls.append((timeout, grace_period))
            return original(timeout, grace_period)

        return join

    torch_elastic.wrap_join(context, wrap)
    assert context.join(5, 1.0) is True and calls == [(5, 1.0)]


def _sentinels(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    context = contexts["process_context"]
    sentinels = torch_elastic.live_sentinels(context)
    assert list(sentinels.values()) == [0]
    torch_elastic.set_live_sentinels(context, {})
    assert context.join() is True  # torch's join waits on (and reports) exactly what we leave there
    torch_elastic.set_live_sentinels(context, sentinels)


def _processes(contexts: Any) -> None:
    from rootcause_engine.upstream import torch_elastic

    (process,) = torch_elastic.processes(contexts["process_context"])
    assert process.pid > 0 and process.exitcode == 0
    (process,) = torch_elastic.function_worker_processes(contexts["function"])
    assert process.exitcode == 0


def _process_exited_exception(_: Any) -> None:
    from torch.multiprocessing import ProcessExitedException

    from rootcause_engine.upstream import torch_elastic

    error = torch_elastic.process_exited_exception("process 1 failed", index=1, pid=42, exit_code=0)
    assert isinstance(error, ProcessExitedException)
    # torch 2.8 keeps the pid as ``pid``, later releases as ``error_pid``; the plugin reads neither
    pid = getattr(error, "error_pid", getattr(error, "pid", None))
    assert (error.error_index, pid, error.exit_code) == (1, 42, 0)


def _get_error_file_path(_: Any) -> None:
    from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

    from rootcause_engine.upstream.torch_worker import error_file_path

    os.environ["TORCHELASTIC_ERROR_FILE"] = "/tmp/seam-error.json"
    try:
        assert error_file_path(ErrorHandler()) == "/tmp/seam-error.json"
    finally:
        del os.environ["TORCHELASTIC_ERROR_FILE"]


def _default_pg_timeout(_: Any) -> None:
    from torch.distributed import distributed_c10d

    from rootcause_engine.upstream.torch_worker import set_default_collective_timeout

    saved = distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout
    try:
        set_default_collective_timeout(42)
        assert distributed_c10d._get_default_timeout(distributed_c10d.Backend.GLOO) == timedelta(seconds=42)
    finally:
        distributed_c10d.default_pg_timeout, distributed_c10d.default_pg_nccl_timeout = saved


def _default_pg_nccl_timeout(_: Any) -> None:
    from torch.distributed import distributed_c10d

    assert distributed_c10d.default_pg_nccl_timeout is None or isinstance(
        distributed_c10d.default_pg_nccl_timeout, timedelta
    )


# A one-rank gloo group with the Flight Recorder on: two all-reduces, then the entries as the probe reads them;
# the script ends its group (a gloo group alive at exit can abort the interpreter: testbed/gloo_scripts.py).
def _dump_fr_trace(_: Any) -> None:
    done = subprocess.run([sys.executable, "-c", flight_recorder_script(destroy=True)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert recorded_position(done.stdout) == FLIGHT_RECORDER_EXPECTED


def _point_to_point(_: Any) -> None:
    # the wrapper binds the caller's arguments to these names to find the peer (a global rank, or the
    # group-rank form with its group); torch.distributed re-exports the same function objects
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    from rootcause_engine.upstream.torch_worker import POINT_TO_POINT_CALLS

    for name, (peer, group_peer) in POINT_TO_POINT_CALLS.items():
        call = getattr(distributed_c10d, name)
        assert getattr(dist, name) is call
        assert parameter_names(call)[:3] == ["tensor", peer, "group"] and group_peer in parameter_names(call)


def _log_handlers(_: Any) -> None:
    import torch  # noqa: F401  (sets up torch's own log handlers)

    from rootcause_engine.upstream.torch_logging import torch_log_handlers

    handlers = torch_log_handlers()
    assert handlers and all(isinstance(handler, logging.Handler) for handler in handlers)


def _execute_task_cmd(_: Any) -> None:
    import click

    from flytekitplugins_rootcause.entrypoint.command import execute_task_cmd
    from flytekitplugins_rootcause.upstream.flytekit_entrypoint import flytekit_execute_command

    command = flytekit_execute_command()
    assert isinstance(command, click.Command) and callable(command.callback)
    assert [p.name for p in execute_task_cmd.params] == [p.name for p in command.params]


def _dispatch_execute(_: Any) -> None:
    from flytekitplugins_rootcause.entrypoint import command

    # flytekit calls ours (``is_map_task=True`` by keyword); we call flytekit's with five positionals.
    assert parameter_names(resolve(f"{ENTRYPOINT}._dispatch_execute")) == parameter_names(command._dispatch_execute)
    assert parameter_names(command._dispatch_execute) == [
        "ctx", "load_task", "inputs_path", "output_prefix", "is_map_task",
    ]


def _build_error_file_name(_: Any) -> None:
    assert isinstance(resolve(f"{ENTRYPOINT}._build_error_file_name")(), str)  # called with no arguments


def _get_worker_name(_: Any) -> None:
    assert isinstance(resolve(f"{ENTRYPOINT}._get_worker_name")(), str)


def _get_container_error_timestamp(_: Any) -> None:
    from flytekitplugins_rootcause.upstream.flytekit_entrypoint import container_error_timestamp

    assert parameter_names(resolve(f"{ENTRYPOINT}.get_container_error_timestamp")) == ["e"]
    assert container_error_timestamp(ValueError("x")).seconds > 0
    assert container_error_timestamp().seconds > 0


def _get_traceback_str(_: Any) -> None:
    from flytekitplugins_rootcause.upstream.flytekit_entrypoint import traceback_str

    assert parameter_names(resolve(f"{ENTRYPOINT}.get_traceback_str")) == ["e"]
    try:
        raise ValueError("seam")
    except ValueError as error:
        assert "seam" in traceback_str(error)


def _get_one_of(_: Any) -> None:
    from flytekitplugins_rootcause.upstream.flytekit_entrypoint import get_one_of

    os.environ["ROOTCAUSE_SEAM_B"] = "b"
    try:
        assert get_one_of("ROOTCAUSE_SEAM_A", "ROOTCAUSE_SEAM_B") == "b"
    finally:
        del os.environ["ROOTCAUSE_SEAM_B"]


def _put_data(_: Any) -> None:
    from flytekit.core.data_persistence import FileAccessProvider

    # flytekit calls ``put_data(engine_dir, output_prefix, is_multipart=True)``; so does our router.
    inspect.signature(FileAccessProvider.put_data).bind(object(), "/local", "s3://remote", is_multipart=True)


def _kfpytorch_execute(_: Any) -> None:
    execute = resolve(f"{KFPYTORCH}.PytorchElasticFunctionTask._execute")
    assert inspect.signature(execute).parameters["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    # kfpytorch's launch reads ``self._task_function`` (what makes swapping it reach the workers).
    assert "_task_function" in execute.__code__.co_names


def _task_function(_: Any) -> None:
    from flytekit import task
    from flytekitplugins.kfpytorch import Elastic

    from flytekitplugins_rootcause.upstream.kfpytorch import task_function_swapped

    elastic_task = task(task_config=Elastic(nnodes=1, nproc_per_node=1))(_elastic_body)
    assert vars(elastic_task)["_task_function"] is _elastic_body and elastic_task.task_function is _elastic_body
    with task_function_swapped(elastic_task, _return_seven):
        assert elastic_task.task_function is _return_seven
    assert vars(elastic_task)["_task_function"] is _elastic_body


class _StubRendezvous:
    """Just what ``LocalElasticAgent.__init__`` and ``AgentParts`` ask of a rendezvous handler."""

    use_agent_store = True

    def get_run_id(self) -> str:
        return "seam"


def _soft_agent_parts(_: Any) -> None:
    """A real ``LocalElasticAgent``, driven through ``AgentParts`` as the soft-restart loop drives it."""
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

    from rootcause_engine.upstream.torch_agent_loop import AgentParts

    spec = WorkerSpec(role="trainer", local_world_size=2, rdzv_handler=_StubRendezvous(),  # type: ignore[arg-type]
                      entrypoint="true", max_restarts=2, monitor_interval=0.25)
    agent = LocalElasticAgent(spec, DefaultLogsSpecs())
    group = agent._worker_group
    group.store, group.group_rank, group.group_world_size = object(), 1, 3
    group.master_addr, group.master_port = "127.0.0.1", 29400
    parts = AgentParts(agent)
    job, workers = parts.round, parts.workers
    assert (job.group_rank, job.group_world_size, workers.local_world_size) == (1, 3, 2)
    assert (job.master_addr, job.master_port, workers.monitor_interval) == ("127.0.0.1", 29400, 0.25)
    assert job.shares_rendezvous_store and job.store is group.store
    assert parts.ending.remaining_restarts == 2
    parts.ending.use_restart()
    assert agent._remaining_restarts == 1
    workers.set_ranks(4, 8)
    assert workers.ranks() == {0: (4, 8), 1: (5, 8)}
    assert [(w.local_rank, w.role_rank, w.role_world_size) for w in group.workers] == [(0, 4, 8), (1, 5, 8)]
    group.workers[0].id = 123
    assert agent._pcontext is None  # what pids() reads once workers run
    for method in ("_start_workers", "_stop_workers", "_monitor_workers"):
        assert parameter_names(resolve(f"{AGENT}.LocalElasticAgent.{method}")) == ["self", "worker_group"]
    assert parameter_names(resolve(f"{WORKER_API}.SimpleElasticAgent._invoke_run"))[:2] == ["self", "role"]


def _abort_process_group(_: Any) -> None:
    # called with no argument: every group of the process (torch documents it for NCCL)
    assert parameter_names(resolve("torch.distributed.distributed_c10d._abort_process_group")) == ["group"]


def _launcher_agent_class(_: Any) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.launcher import api as launcher_api

    from rootcause_engine.upstream.torch_agent_loop import launcher_agent_with_loop

    assert launcher_api.LocalElasticAgent is LocalElasticAgent  # launch_agent builds its agent from this global
    with launcher_agent_with_loop(lambda parts: None):  # type: ignore[arg-type,return-value]
        replaced = launcher_api.LocalElasticAgent
        assert issubclass(replaced, LocalElasticAgent) and replaced is not LocalElasticAgent
        assert "_invoke_run" in vars(replaced)
    assert launcher_api.LocalElasticAgent is LocalElasticAgent


def _matches_machine_hostname(_: Any) -> None:
    from rootcause_engine.upstream.torch_elastic import endpoint_is_this_machine

    # torch's own answers, on names and addresses that need no DNS
    assert endpoint_is_this_machine("localhost") and endpoint_is_this_machine("127.0.0.1")
    assert not endpoint_is_this_machine("10.1.2.3")


def _create_tcp_store_server(_: Any) -> None:
    """torch's rank-0 rendezvous asks the handler for the workers' store server, with these arguments."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from rootcause_engine.upstream.torch_elastic import patch_bootstrap_store_server

    handler_class = dynamic_rendezvous.DynamicRendezvousHandler
    original = handler_class._create_tcp_store_server
    assert parameter_names(original) == ["self", "master_addr", "master_port"]
    assert "_create_tcp_store_server" in handler_class.next_rendezvous.__code__.co_names
    seen = []

    def create(torch_create: Callable[[str, int], Any], addr: str, port: int) -> str:
        seen.append((addr, port))
        return "kept elsewhere"

    with patch_bootstrap_store_server(create):
        assert handler_class._create_tcp_store_server(object(), "127.0.0.1", 0) == "kept elsewhere"
    assert seen == [("127.0.0.1", 0)] and handler_class._create_tcp_store_server is original


def _termination_handler(_: Any) -> None:
    """torch installs its termination handler by the module global's name each time it starts workers,
    and raises ``SignalException(message, sigval=...)``; the patch routes SIGTERM alone."""
    import signal

    from torch.distributed.elastic.multiprocessing import api

    from rootcause_engine.upstream.torch_elastic import patch_termination_handler, signal_exception

    assert "_terminate_process_handler" in api.PContext.start.__code__.co_names
    raised = signal_exception(signal.SIGTERM)
    assert isinstance(raised, api.SignalException) and raised.sigval == signal.SIGTERM
    original, seen = api._terminate_process_handler, []
    with patch_termination_handler(lambda signum, frame: seen.append(signum)):
        api._terminate_process_handler(signal.SIGTERM, None)
        with pytest.raises(api.SignalException):
            api._terminate_process_handler(signal.SIGINT, None)  # torch's own, for every other signal
    assert seen == [signal.SIGTERM] and api._terminate_process_handler is original


def _running_job_parts(_: Any) -> None:
    """A pod joining a running job: the handler's own store (a TCPStore client, outside any round),
    scoped to the run id, and a worker group filled in without a rendezvous."""
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    from rootcause_engine.upstream.torch_agent_loop import AgentParts
    from testbed.tcp_store import master_store

    server = master_store()
    handler = dynamic_rendezvous.DynamicRendezvousHandler.from_backend(
        "run-1", server, C10dRendezvousBackend(server, "run-1"), min_nodes=1, max_nodes=2)
    assert handler._store is server
    spec = WorkerSpec(role="trainer", local_world_size=2, rdzv_handler=handler, entrypoint="true", max_restarts=1)
    agent = LocalElasticAgent(spec, DefaultLogsSpecs())
    parts = AgentParts(agent)
    parts.round.job_store.set("k", "v")
    assert server.get("rootcause/run-1/k") == b"v"
    parts.round.enter_running_job(3, 4)
    assert agent._store is server and agent._worker_group.group_rank == 3
    assert parts.workers.ranks() == {0: (6, 8), 1: (7, 8)}
    assert parts.round.world_store_address == ("127.0.0.1", server.port)


def _default_group_lifecycle(_: Any) -> None:
    """Run in a child: the wrap is for good, in the process it is made in."""
    import subprocess
    import sys

    script = '''
import datetime, torch.distributed as dist
from torch.distributed import distributed_c10d
from rootcause_engine.upstream.torch_worker import wrap_default_group_lifecycle
seen = []
wrap_default_group_lifecycle(lambda init: (seen.append("init"), init()), lambda: seen.append("destroy"))
wrap_default_group_lifecycle(lambda init: seen.append("twice"), lambda: seen.append("twice"))
assert dist.init_process_group is distributed_c10d.init_process_group
store = dist.HashStore()
dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=10))
assert dist.is_initialized() and seen == ["init"]
dist.destroy_process_group()
assert not dist.is_initialized() and seen == ["init", "destroy"], seen
'''
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]


#: Per declared symbol (qualified name), the test of how the plugin uses it.
SMOKE_TESTS: dict[str, Callable[[Any], None]] = {
    f"{AGENT}.start_processes": _start_processes,
    f"{AGENT}.LocalElasticAgent._rendezvous": _rendezvous,
    **{f"{WORKER_API}.{path}": _worker_group for path in (
        "WorkerGroup.store", "WorkerGroup.group_rank", "WorkerGroup.group_world_size", "WorkerGroup.workers",
        "Worker.global_rank",
    )},
    f"{AGENT}.LocalElasticAgent._exit_barrier": _exit_barrier,
    f"{API}.PContext.close": _close,
    f"{API}.PContext.pids": _pids,
    f"{API}.PContext.envs": _envs,
    f"{API}.PContext.error_files": _error_files,
    f"{API}.PContext.nprocs": _nprocs,
    f"{API}.MultiprocessContext._pc": _pc,
    f"{API}.MultiprocessContext._return_values": _return_values,
    f"{API}.MultiprocessContext._worker_finished_event": _worker_finished_event,
    f"{API}.SubprocessContext.subprocess_handlers": _subprocess_handlers,
    "torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler.SubprocessHandler.proc": _proc,
    f"{SPAWN}.ProcessContext.join": _join,
    f"{SPAWN}.ProcessContext.sentinels": _sentinels,
    f"{SPAWN}.ProcessContext.processes": _processes,
    f"{SPAWN}.ProcessExitedException": _process_exited_exception,
    "torch.distributed.elastic.multiprocessing.errors.error_handler.ErrorHandler._get_error_file_path": (
        _get_error_file_path
    ),
    "torch.distributed.distributed_c10d.default_pg_timeout": _default_pg_timeout,
    "torch.distributed.distributed_c10d.default_pg_nccl_timeout": _default_pg_nccl_timeout,
    "torch._logging._internal.handlers": _log_handlers,
    "torch._C._distributed_c10d._dump_fr_trace": _dump_fr_trace,
    "torch.distributed.distributed_c10d.send": _point_to_point,
    "torch.distributed.distributed_c10d.recv": _point_to_point,
    f"{ENTRYPOINT}.execute_task_cmd": _execute_task_cmd,
    f"{ENTRYPOINT}._dispatch_execute": _dispatch_execute,
    f"{ENTRYPOINT}._build_error_file_name": _build_error_file_name,
    f"{ENTRYPOINT}._get_worker_name": _get_worker_name,
    f"{ENTRYPOINT}.get_container_error_timestamp": _get_container_error_timestamp,
    f"{ENTRYPOINT}.get_traceback_str": _get_traceback_str,
    f"{ENTRYPOINT}.get_one_of": _get_one_of,
    "flytekit.core.data_persistence.FileAccessProvider.put_data": _put_data,
    f"{KFPYTORCH}.PytorchElasticFunctionTask._execute": _kfpytorch_execute,
    f"{KFPYTORCH}.PytorchElasticFunctionTask._task_function": _task_function,
    "torch.distributed.launcher.api.LocalElasticAgent": _launcher_agent_class,
    "torch.distributed.distributed_c10d._abort_process_group": _abort_process_group,
    "torch.distributed.elastic.rendezvous.utils._matches_machine_hostname": _matches_machine_hostname,
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous.DynamicRendezvousHandler._create_tcp_store_server":
        _create_tcp_store_server,
    **{f"{WORKER_API}.{path}": _soft_agent_parts for path in (
        "SimpleElasticAgent._invoke_run", "SimpleElasticAgent._worker_group", "SimpleElasticAgent._remaining_restarts",
        "WorkerGroup.spec", "WorkerGroup.master_addr", "WorkerGroup.master_port", "WorkerSpec.rdzv_handler",
        "Worker.local_rank", "Worker.role_rank", "Worker.world_size", "Worker.role_world_size", "Worker.id",
    )},
    **{f"{AGENT}.LocalElasticAgent.{path}": _soft_agent_parts for path in (
        "_pcontext", "_start_workers", "_stop_workers", "_monitor_workers",
    )},
    f"{WORKER_API}.SimpleElasticAgent._store": _running_job_parts,
    f"{WORKER_API}.Worker": _running_job_parts,
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous.DynamicRendezvousHandler._store": _running_job_parts,
    "torch.distributed.elastic.multiprocessing.api._terminate_process_handler": _termination_handler,
    "torch.distributed.elastic.multiprocessing.api.SignalException": _termination_handler,
    "torch.distributed.distributed_c10d.init_process_group": _default_group_lifecycle,
    "torch.distributed.distributed_c10d.destroy_process_group": _default_group_lifecycle,
}


def test_every_declared_symbol_has_a_smoke_test_and_is_listed_in_the_contract() -> None:
    declared = {symbol.qualified_name for symbol in all_symbols()}
    assert declared == set(SMOKE_TESTS)
    contract = " ".join(" ".join(seam.__doc__ or "" for seam in SEAMS).split())
    assert [name for name in sorted(declared) if f"``{name}``" not in contract] == []


class _Contexts:
    """The torch objects a smoke test asks for, started only when it asks (flytekit's need none)."""

    FIXTURES = {"function": "function_context", "binary": "binary_context", "process_context": "process_context"}

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request

    def __getitem__(self, key: str) -> Any:
        return self.request.getfixturevalue(self.FIXTURES[key])


@pytest.mark.parametrize("name", sorted(SMOKE_TESTS))
def test_symbol(name: str, request: pytest.FixtureRequest) -> None:
    (symbol,) = [symbol for symbol in all_symbols() if symbol.qualified_name == name]
    versions.check_symbol(symbol)  # exists where the check looks
    if not symbol.instance_attribute:
        resolve(name)  # and where the smoke test looks
    SMOKE_TESTS[name](_Contexts(request))  # type: ignore[arg-type]


def test_every_seam_check_passes_on_the_installed_upstream() -> None:
    versions.require(all_symbols())
    for distribution in versions.VERIFIED:
        assert versions.version_warning(distribution) is None, distribution


# --- the version check --------------------------------------------------------------------------------


def test_release_and_range() -> None:
    assert release_of("2.13.0+cpu") == (2, 13, 0)
    assert release_of("1.16.31") == (1, 16, 31)
    assert release_of("2.14.0a0+git1234") == (2, 14, 0)
    assert release_of("unknown") is None
    torch_range = VerifiedRange((2, 13), (2, 14))
    assert "2.13.0+cpu" in torch_range and "2.13" in torch_range and "2.13.9" in torch_range
    assert "2.12.1" not in torch_range and "2.14.0" not in torch_range and "garbage" not in torch_range
    assert str(torch_range) == ">=2.13,<2.14"


@pytest.mark.parametrize("version", ["2.16.0", "2.7.1+cpu"], ids=["newer", "older"])
def test_a_version_outside_the_verified_range_warns_and_patches(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """Newer or older than verified: a warning naming the version and the range, never a refusal."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from rootcause_engine.upstream import torch_elastic

    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda name: version if name == "torch" else real(name))
    assert versions.version_warning("torch") == (
        f"root-cause diagnosis not verified on torch {version} (verified: torch{versions.VERIFIED['torch']})"
    )
    with torch_elastic.patch_agent_phases(on_rendezvous=lambda _: None, on_exit_barrier=lambda _: None):
        assert "_rendezvous" in vars(LocalElasticAgent)  # patched all the same
    monkeypatch.setattr(versions, "installed_version", lambda name: None)
    assert versions.version_warning("flytekit") is None  # not installed: its symbols say what is missing


def test_a_missing_symbol_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated by removing the method from torch's agent class for the test."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from rootcause_engine.upstream import torch_elastic

    original = LocalElasticAgent._exit_barrier
    monkeypatch.delattr(SimpleElasticAgent, "_exit_barrier")
    with pytest.raises(UnsupportedUpstreamError) as raised, torch_elastic.patch_agent_phases(
        on_rendezvous=lambda _: None, on_exit_barrier=lambda _: None
    ):
        pytest.fail("patched a missing method")
    message = str(raised.value)
    assert f"{AGENT}.LocalElasticAgent._exit_barrier" in message
    assert f"torch {versions.installed_version('torch')} has no" in message and "to time the exit barrier" in message
    assert "_rendezvous" not in vars(LocalElasticAgent)  # nothing was patched
    monkeypatch.undo()
    assert LocalElasticAgent._exit_barrier is original


@pytest.mark.parametrize(
    "symbol",
    [
        Symbol("torch", "torch.no_such_module", "anything", "uses"),
        Symbol("torch", SPAWN, "ProcessContext.no_such_method", "calls"),
        Symbol("torch", SPAWN, "NoSuchClass.join", "calls"),
        Symbol("torch", API, "MultiprocessContext._no_such_attribute", "reads", instance_attribute=True),
    ],
    ids=lambda symbol: symbol.path,
)
def test_each_kind_of_missing_symbol_is_detected(symbol: Symbol) -> None:
    with pytest.raises(UnsupportedUpstreamError, match=symbol.qualified_name.replace(".", r"\.")):
        versions.require([symbol])


def test_the_check_runs_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from rootcause_engine.upstream import torch_logging

    lookups: list[str] = []
    real = versions._resolve
    monkeypatch.setattr(versions, "_resolve", lambda symbol: lookups.append(symbol.qualified_name) or real(symbol))
    torch_logging.torch_log_handlers()
    torch_logging.torch_log_handlers()
    assert lookups == [symbol.qualified_name for symbol in torch_logging.SYMBOLS]


def test_importing_the_plugin_or_the_entrypoint_seam_checks_nothing_and_imports_no_torch() -> None:
    """flytekit imports the plugin at its own import time: no seam module may load then."""
    code = (
        "import sys, flytekit, flytekitplugins_rootcause\n"
        "print(sorted(m for m in sys.modules if m.startswith('flytekitplugins_rootcause.upstream')))\n"
        "import flytekitplugins_rootcause.upstream.flytekit_entrypoint\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "False"], done.stdout


# --- the patching helper --------------------------------------------------------------------------------


class _Base:
    def method(self) -> str:
        return "base"


class _Child(_Base):
    own = "child"


def test_patched_restores_a_module_global_and_deletes_an_added_one() -> None:
    module = types.ModuleType("seam_target")
    module.value = 1
    with patched(module, value=2, added=3):
        assert (module.value, module.added) == (2, 3)
    assert module.value == 1 and not hasattr(module, "added")


def test_patched_deletes_an_inherited_class_attribute_again() -> None:
    def replacement(self: Any) -> str:
        return "patched"

    with patched(_Child, method=replacement, own="patched"):
        assert _Child().method() == "patched" and _Child.own == "patched"
    assert "method" not in vars(_Child) and _Child.method is _Base.method
    assert vars(_Child)["own"] == "child"


def test_patched_restores_an_instance_attribute_and_lets_the_class_method_show_through() -> None:
    instance = _Child()
    instance.own = "instance"
    with patched(instance, method=lambda: "patched", own="patched"):
        assert instance.method() == "patched" and instance.own == "patched"
    assert "method" not in vars(instance) and instance.method() == "base"
    assert vars(instance)["own"] == "instance"


def test_patched_restores_when_the_block_raises() -> None:
    instance = _Child()
    with pytest.raises(ValueError, match="inside"), patched(instance, method=lambda: "patched"):
        raise ValueError("inside")
    assert "method" not in vars(instance)


def test_patched_restores_what_it_set_when_a_later_attribute_cannot_be_set() -> None:
    class Guarded:
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "refused":
                raise AttributeError("refused")
            super().__setattr__(name, value)

    target = Guarded()
    target.first = "original"
    with pytest.raises(AttributeError, match="refused"), patched(target, first="patched", refused=1):
        pytest.fail("entered the block")
    assert vars(target) == {"first": "original"}


def test_nested_patches_unwind_innermost_first() -> None:
    module = types.ModuleType("seam_target")
    module.value = 0
    with patched(module, value=1):
        with patched(module, value=2):
            assert module.value == 2
        assert module.value == 1
    assert module.value == 0


def test_patched_refuses_a_target_without_a_dict() -> None:
    with pytest.raises(TypeError, match="no __dict__"), patched(object(), anything=1):
        pass


def test_wrap_attribute_wraps_for_good_and_returns_the_original() -> None:
    instance = _Child()
    original = wrap_attribute(instance, "method", lambda method: lambda: method() + "+wrapped")
    assert original() == "base" and instance.method() == "base+wrapped"


# --- nothing outside the seam patches upstream ------------------------------------------------------------


def _upstream_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> upstream module or object, for every import of torch, flytekit or a flytekit plugin."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in UPSTREAM_PACKAGES:
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UPSTREAM_PACKAGES:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def upstream_violations(source: str, path: str) -> list[str]:
    """Where ``source`` changes upstream objects, or reads their private parts, other than through the seam.

    Looks for: assignments to (and ``del`` of) attributes of names imported from torch, flytekit or
    a flytekit plugin; any ``setattr``/``delattr`` call (a patch whose target the scan cannot see);
    ``self.<attr> = ...`` in a subclass of an upstream class where the base has ``<attr>`` (set on the
    class or by its constructor), and ``self._private`` reads there of the base's private parts; reads
    of ``x._private`` on an imported upstream name, and ``getattr``/``hasattr`` of a private name on
    anything (how an untyped upstream object such as torch's process context is read); and imports
    of private upstream modules or names. ``super()._method(...)`` (extending an upstream method,
    declared in the seam as such) is not flagged.
    """
    tree = ast.parse(source)
    imported = _upstream_names(tree)
    found: list[str] = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for written in [part for target in targets for part in ast.walk(target)]:
            if isinstance(written, ast.Attribute) and _root_name(written) in imported:
                report(written, f"writes {ast.unparse(written)} (an upstream object)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            report(node, f"calls {node.func.id}()")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            report(node, f"reads {node.args[1].value!r} by name ({node.func.id}: a private attribute)")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and _is_private(node.attr)
            and _root_name(node) in imported
        ):
            report(node, f"reads {ast.unparse(node)} (private upstream attribute)")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UPSTREAM_PACKAGES:
            private = [part for part in node.module.split(".") if _is_private(part)]
            private += [alias.name for alias in node.names if _is_private(alias.name)]
            if private:
                report(node, f"imports private upstream {private} from {node.module}")
        if isinstance(node, ast.ClassDef):
            found.extend(_subclass_violations(node, imported, path))
    return found


def _subclass_violations(cls: ast.ClassDef, imported: dict[str, str], path: str) -> list[str]:
    bases = [resolve(imported[base.id]) for base in cls.bases if isinstance(base, ast.Name) and base.id in imported]
    if not bases:
        return []
    found = []

    def upstream_owner(name: str) -> type | None:
        return next((base for base in bases if hasattr(base, name) or _constructor_sets(base, name)), None)

    for node in ast.walk(cls):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            continue
        owner = upstream_owner(node.attr)
        if owner is None:
            continue
        where = f"{path}:{node.lineno}"
        if isinstance(node.ctx, ast.Store | ast.Del):
            found.append(f"{where}: sets self.{node.attr}, an attribute of {owner.__name__}")
        elif _is_private(node.attr):
            found.append(f"{where}: reads self.{node.attr}, a private attribute of {owner.__name__}")
    return found


def _constructor_sets(cls: type, name: str) -> bool:
    return any(
        isinstance(init := vars(base).get("__init__"), types.FunctionType) and name in init.__code__.co_names
        for base in cls.__mro__
    )


def package_sources() -> Iterator[tuple[str, str]]:
    for package_dir, seam_dir in PACKAGE_DIRS:
        for path in sorted(package_dir.rglob("*.py")):
            if seam_dir not in path.parents:
                yield str(path.relative_to(package_dir.parent)), path.read_text()


def test_no_module_outside_the_seam_patches_or_privately_reads_upstream() -> None:
    violations = [v for path, source in package_sources() for v in upstream_violations(source, path)]
    assert violations == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import flytekit.bin.entrypoint as fe\nfe._dispatch_execute = f\n", "writes fe._dispatch_execute"),
        ("from torch.distributed import distributed_c10d as c\nc.default_pg_timeout = 1\n", "writes c.default_pg"),
        ("from torch.x import LocalElasticAgent\ndel LocalElasticAgent._rendezvous\n", "writes LocalElasticAgent"),
        ("def patch(owner, value):\n    setattr(owner, 'x', value)\n", "calls setattr()"),
        ("import flytekit.bin.entrypoint as fe\noriginal = fe._dispatch_execute\n", "reads fe._dispatch_execute"),
        ("from torch._logging import _internal\n", "imports private upstream"),
        (
            "from flytekitplugins.kfpytorch.task import PytorchElasticFunctionTask\n"
            "class T(PytorchElasticFunctionTask):\n    def _execute(self):\n        self._task_function = None\n",
            "sets self._task_function",
        ),
        (
            "from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler\n"
            "class H(ErrorHandler):\n    def record(self):\n        return self._get_error_file_path()\n",
            "reads self._get_error_file_path",
        ),
        ("def delivered(pcontext):\n    return getattr(pcontext, '_return_values', None)\n", "reads '_return_values'"),
    ],
)
def test_the_scan_finds_each_kind_of_patch(source: str, expected: str) -> None:
    (violation,) = upstream_violations(source, "example.py")
    assert expected in violation


# --- front-end names the engine keeps without importing the front-end -----------------------------------


def test_the_engine_s_names_for_flytekit_and_kfpytorch_things_still_resolve() -> None:
    """The engine imports no front-end, so it names two of their things as strings: kfpytorch's
    recoverable marker file and the exception classes that ask Flyte for a retry."""
    from flytekit.exceptions.user import FlyteRecoverableException
    from flytekitplugins.kfpytorch.error_handling import RECOVERABLE_ERROR_FILE_NAME

    from rootcause_engine.agent.launch_record import RECOVERABLE_MARKER_FILE_NAME
    from rootcause_engine.worker.recorder import RECOVERABLE_EXCEPTION_TYPES, is_recoverable_exception

    assert RECOVERABLE_MARKER_FILE_NAME == RECOVERABLE_ERROR_FILE_NAME
    assert all(isinstance(resolve(name), type) for name in RECOVERABLE_EXCEPTION_TYPES)

    class SpotReclaimed(FlyteRecoverableException):
        pass

    assert is_recoverable_exception(FlyteRecoverableException("x")) and is_recoverable_exception(SpotReclaimed("x"))
    assert not is_recoverable_exception(RuntimeError("x"))


def test_the_exception_classes_that_forbid_flyte_2_a_retry_are_named_as_flyte_2_names_them() -> None:
    """The recorder names them without importing Flyte 2 (a flytekit worker has none)."""
    from flyte.errors import NonRecoverableError

    from rootcause_engine.worker.recorder import (
        RETRY_REFUSING_EXCEPTION_TYPES,
        build_error_file,
        parse_error_file,
        refuses_retry,
    )

    assert all(isinstance(resolve(name), type) for name in RETRY_REFUSING_EXCEPTION_TYPES)

    class BadData(NonRecoverableError):
        pass

    assert refuses_retry(NonRecoverableError("x")) and refuses_retry(BadData("x"))
    assert not refuses_retry(RuntimeError("x"))
    recorded = parse_error_file(json.dumps(build_error_file(BadData("corrupt shard"), 1)))
    assert recorded.retry_refused and not recorded.recoverable
    assert not parse_error_file(json.dumps(build_error_file(ValueError("x"), 1))).retry_refused


def test_the_shared_error_file_is_the_one_flytekit_writes_and_propeller_reads() -> None:
    """``error.pb`` has one home here (``rootcause_core.error_files``); flytekit names it too."""
    from flytekit.core.constants import ERROR_FILE_NAME as FLYTEKITS

    from rootcause_core.error_files import ERROR_FILE_NAME

    assert ERROR_FILE_NAME == FLYTEKITS == "error.pb"
