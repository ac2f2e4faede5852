"""The launch patches of ``rootcause_engine/upstream/torch_elastic.py`` on torch's real classes and modules:
what each puts in place for the block, what it calls, and that torch's own comes back after it."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from torch.distributed import TCPStore
from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.distributed.elastic.agent.server.api import SimpleElasticAgent, WorkerGroup, WorkerSpec
from torch.distributed.elastic.multiprocessing import api
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

from rootcause_engine.upstream import torch_elastic
from rootcause_engine.upstream.torch_elastic import JoinedRound


def _noted(notes: list[Any], name: str) -> Callable[[Any], None]:
    return lambda value: notes.append((name, value))


def _worker_group(store: object, group_rank: int, first_global_rank: int) -> WorkerGroup:
    spec = WorkerSpec(role="trainer", local_world_size=2, rdzv_handler=object(), entrypoint="true")  # type: ignore[arg-type]
    group = WorkerGroup(spec)
    group.store, group.group_rank, group.group_world_size = store, group_rank, 4
    for index, worker in enumerate(group.workers):
        worker.global_rank = first_global_rank + index
    return group


def test_the_agent_phases_are_bracketed_and_the_joined_round_is_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    store = object()
    notes: list[Any] = []

    def rendezvous(agent: Any, worker_group: WorkerGroup) -> str:
        notes.append("torch's rendezvous")
        return "rendezvous result"

    def exit_barrier(agent: Any) -> None:
        notes.append("torch's exit barrier")
        raise TimeoutError("barrier timed out")

    monkeypatch.setattr(SimpleElasticAgent, "_rendezvous", rendezvous)
    monkeypatch.setattr(SimpleElasticAgent, "_exit_barrier", exit_barrier)
    with torch_elastic.patch_agent_phases(
        on_rendezvous=_noted(notes, "rendezvous"),
        on_exit_barrier=_noted(notes, "exit barrier"),
        after_rendezvous=_noted(notes, "joined"),
    ):
        agent = object.__new__(local_elastic_agent.LocalElasticAgent)
        assert agent._rendezvous(_worker_group(store, 1, 2)) == "rendezvous result"
        with pytest.raises(TimeoutError, match="barrier timed out"):
            agent._exit_barrier()
    assert notes == [
        ("rendezvous", True),
        "torch's rendezvous",
        ("joined", JoinedRound(store=store, group_rank=1, group_world_size=4, global_ranks=(2, 3))),
        ("rendezvous", False),
        ("exit barrier", True),
        "torch's exit barrier",
        ("exit barrier", False),  # noted however the phase ends
    ]
    assert "_rendezvous" not in vars(local_elastic_agent.LocalElasticAgent)
    assert "_exit_barrier" not in vars(local_elastic_agent.LocalElasticAgent)


def test_a_round_that_cannot_be_read_is_logged_and_the_rendezvous_still_returns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(SimpleElasticAgent, "_rendezvous", lambda agent, group: "done")
    joined: list[JoinedRound] = []
    unreadable = SimpleNamespace(store=object(), group_rank="not a rank", group_world_size=2, workers=[])
    with caplog.at_level(logging.WARNING, logger=torch_elastic.__name__), torch_elastic.patch_agent_phases(
        on_rendezvous=lambda entered: None, on_exit_barrier=lambda entered: None, after_rendezvous=joined.append
    ):
        agent = object.__new__(local_elastic_agent.LocalElasticAgent)
        assert agent._rendezvous(unreadable) == "done"
    assert joined == []
    assert "could not read the rendezvous round from torch's worker group" in caplog.text


def test_start_processes_is_wrapped_for_the_block_only() -> None:
    torch_start = local_elastic_agent.start_processes
    wrapped_with: list[Any] = []

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        wrapped_with.append(original)
        return lambda **kwargs: ("observed", original)

    with torch_elastic.patch_start_processes(wrap):
        assert local_elastic_agent.start_processes(name="x") == ("observed", torch_start)
    assert wrapped_with == [torch_start]
    assert local_elastic_agent.start_processes is torch_start


def test_sigterm_goes_to_the_callback_and_other_signals_to_torch_s_handler() -> None:
    torch_handler = api._terminate_process_handler
    seen: list[int] = []
    with torch_elastic.patch_termination_handler(lambda signum, frame: seen.append(signum)):
        api._terminate_process_handler(signal.SIGTERM, None)
        with pytest.raises(api.SignalException) as raised:
            api._terminate_process_handler(signal.SIGINT, None)
    assert seen == [signal.SIGTERM]
    assert raised.value.sigval == signal.SIGINT
    assert api._terminate_process_handler is torch_handler


def test_signal_exception_is_the_one_torch_s_handler_raises() -> None:
    error = torch_elastic.signal_exception(signal.SIGTERM)
    with pytest.raises(api.SignalException) as torch_s:
        api._terminate_process_handler(signal.SIGTERM, None)
    assert type(error) is type(torch_s.value)
    assert (error.sigval, str(error)) == (torch_s.value.sigval, str(torch_s.value))
    assert error.sigval == signal.SIGTERM


def test_the_bootstrap_store_server_is_made_by_the_given_function_which_may_call_torch_s() -> None:
    handler_class = DynamicRendezvousHandler
    torch_create = vars(handler_class)["_create_tcp_store_server"]
    asked: list[tuple[str, int]] = []
    servers: list[TCPStore] = []

    def create(torch_create_server: Callable[[str, int], Any], addr: str, port: int) -> TCPStore:
        asked.append((addr, port))
        server = torch_create_server(addr, 0)  # torch's own: a real store server, here on a free loopback port
        servers.append(server)
        return server

    with torch_elastic.patch_bootstrap_store_server(create):
        handler = object.__new__(handler_class)
        made = handler._create_tcp_store_server("127.0.0.1", 29500)
    assert asked == [("127.0.0.1", 29500)] and made is servers[0]
    assert isinstance(made, TCPStore) and made.port > 0
    made.set("key", "value")
    assert made.get("key") == b"value"
    assert vars(handler_class)["_create_tcp_store_server"] is torch_create


@pytest.mark.parametrize(("host", "here"), [("localhost", True), ("127.0.0.1", True), ("::1", True),
                                            ("192.0.2.7", False)])
def test_the_endpoint_is_this_machine_as_torch_decides_it(host: str, here: bool) -> None:
    assert torch_elastic.endpoint_is_this_machine(host) is here


def test_this_machine_s_own_name_is_this_machine() -> None:
    assert torch_elastic.endpoint_is_this_machine(socket.gethostname())


def test_close_is_wrapped_on_the_one_context() -> None:
    class Context:
        def close(self, death_sig: int = signal.SIGTERM, timeout: int = 30) -> None:
            closes.append(("torch", death_sig, timeout))

    closes: list[Any] = []

    def wrap(close: Callable[..., None]) -> Callable[..., None]:
        def graceful(death_sig: int = signal.SIGTERM, timeout: int = 30) -> None:
            closes.append(("wrapped", timeout))
            close(death_sig, 2)

        return graceful

    context, other = Context(), Context()
    torch_elastic.wrap_close(context, wrap)
    context.close(signal.SIGTERM, 30)
    other.close()
    assert closes == [("wrapped", 30), ("torch", signal.SIGTERM, 2), ("torch", signal.SIGTERM, 30)]


def test_readers_of_a_context_that_lacks_the_attribute_answer_unknown() -> None:
    bare = SimpleNamespace()
    assert torch_elastic.worker_envs(bare) == {} and torch_elastic.worker_error_files(bare) == {}
    assert torch_elastic.worker_count(bare) == -1
    assert torch_elastic.collected_return_values(bare) is None
    # return values without the "finished" event are a binary launch's: none
    assert torch_elastic.collected_return_values(SimpleNamespace(_return_values={0: 1})) is None
    assert torch_elastic.collected_return_values(SimpleNamespace(_return_values={0: 1}, _worker_finished_event=1)) == {
        0: 1
    }
    assert torch_elastic.binary_worker_returncode(SimpleNamespace(subprocess_handlers={}), 0) is None
    assert torch_elastic.function_worker_processes(bare) is None
    assert torch_elastic.joinable_process_context(SimpleNamespace(_pc=SimpleNamespace())) is None
