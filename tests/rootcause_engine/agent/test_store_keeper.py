"""The job's stores in keeper processes when the agent forks its workers (``agent/store_keeper.py``).

The "agent" here is a real subprocess that enters the keepers' block and then runs torch's own c10d
rendezvous (its store, then a round, whose rank 0 creates the workers' shared store); the test
talks to both stores over loopback like any peer, and kills the agent as a lost pod would be killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_engine.agent import store_keeper
from rootcause_engine.agent.rendezvous_host import process_listens_on
from rootcause_engine.agent.store_keeper import bind_listener, keeps_rendezvous_store, stores_kept
from rootcause_harness.loopback import bound_dns_waits, free_port
from testbed.sync import wait_until
from testbed.tcp_store import client

#: Generous on a busy machine; every wait below ends as soon as what it waits for is true.
PATIENCE_S = 60.0

AGENT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import _create_tcp_store
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
    from rootcause_engine.agent.rendezvous_host import process_listens_on
    from rootcause_engine.agent.store_keeper import stores_kept

    port, start_method, rendezvous = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "rendezvous"
    endpoint = f"127.0.0.1:{port}"
    with stores_kept(start_method, "c10d", endpoint, {}) as kept:
        params = RendezvousParameters(backend="c10d", endpoint=endpoint, run_id="keeper-test",
                                      min_nodes=1, max_nodes=1)
        store = _create_tcp_store(params)  # torch's own choice: host the store, or connect to it
        store.set("written-by", "agent")
        handed = []
        if sys.argv[3] == "hand-over":  # a patch raised after the block began: upstream's launch runs next
            handed = [keeper.pid for keeper in kept.keepers]
            kept.hand_over()
        workers_port = None
        if rendezvous:  # torch's whole rendezvous, which creates the workers' store on rank 0
            handler = get_rendezvous_handler(params)
            info = handler.next_rendezvous()
            workers_port = info.bootstrap_store_info.master_port
            TCPStore("127.0.0.1", workers_port, is_master=False).set("written-by", "rank 0 agent")
        threads = sorted(
            Path(f"/proc/self/task/{tid}/comm").read_text().strip() for tid in os.listdir("/proc/self/task")
        )
        print(json.dumps({
            "agent": os.getpid(),
            "keepers": [] if kept is None else [keeper.pid for keeper in kept.keepers] + handed,
            "agent_listens": process_listens_on(os.getpid(), port),
            "workers_port": workers_port,
            "threads": threads,
        }), flush=True)
        sys.stdin.readline()  # hold the block until the test says so (or kills this process)
        if rendezvous:
            handler.shutdown()
    print("block left", flush=True)
    sys.stdin.readline()
    """
)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return status != "Z"


class Agent:
    def __init__(self, port: int, start_method: str, mode: str) -> None:
        env = bound_dns_waits(dict(os.environ))
        self.process = subprocess.Popen([sys.executable, "-c", AGENT, str(port), start_method, mode], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.facts = json.loads(self.process.stdout.readline())

    def say(self) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=PATIENCE_S)


@pytest.fixture
def agent_factory() -> Iterator:  # type: ignore[type-arg]
    agents: list[Agent] = []

    def start(port: int, start_method: str = "fork", mode: str = "rendezvous") -> Agent:
        agents.append(Agent(port, start_method, mode))
        return agents[-1]

    yield start
    for agent in agents:
        agent.close()


@pytest.mark.parametrize(
    ("start_method", "backend", "endpoint", "configs", "expected"),
    [
        ("fork", "c10d", "127.0.0.1:29500", None, True),
        ("fork", "c10d", "localhost:29500", {"timeout": 900}, True),
        ("spawn", "c10d", "127.0.0.1:29500", None, False),  # a spawned worker inherits no lock
        ("forkserver", "c10d", "127.0.0.1:29500", None, False),
        ("fork", "c10d", "localhost:0", None, False),  # torch picks its own port
        ("fork", "c10d", "127.0.0.1:29500", {"is_host": True}, False),  # torch would not fall back
        ("fork", "etcd", "127.0.0.1:2379", None, False),
        ("fork", "c10d", "10.1.2.3:29500", None, False),  # another machine hosts it
        ("fork", "c10d", None, None, False),
    ],
)
def test_the_store_is_kept_out_of_the_agent_only_where_the_agent_would_host_it_and_forks(
    start_method: str, backend: str, endpoint: str | None, configs: dict | None, expected: bool  # type: ignore[type-arg]
) -> None:
    assert keeps_rendezvous_store(start_method, backend, endpoint, configs) is expected


def thread_names(pid: int) -> list[str]:
    return [(Path(f"/proc/{pid}/task") / tid / "comm").read_text().strip() for tid in os.listdir(f"/proc/{pid}/task")]


def store_threads(names: list[str]) -> list[str]:
    return [name for name in names if name.startswith("pt_tcpstore")]


def test_a_forking_agent_serves_no_store_from_its_own_threads_and_still_hosts_both(agent_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    facts = agent_factory(port).facts
    rendezvous_keeper, workers_keeper = facts["keepers"]
    # torch's rendezvous and torch's rank-0 store factory: both servers run in keepers, none in the agent
    assert not store_threads(facts["threads"]), facts["threads"]
    assert store_threads(thread_names(rendezvous_keeper))
    assert store_threads(thread_names(workers_keeper))
    assert process_listens_on(rendezvous_keeper, port)
    assert process_listens_on(workers_keeper, facts["workers_port"])
    # the agent still holds both listening sockets: the pod is the stores' host for rendezvous_host
    assert facts["agent_listens"] is True
    assert process_listens_on(facts["agent"], port)
    assert process_listens_on(facts["agent"], facts["workers_port"])
    # peers reach both stores and read what the agent wrote through them
    assert client(port).get("written-by") == b"agent"
    assert client(facts["workers_port"]).get("written-by") == b"rank 0 agent"


def test_the_stores_die_with_their_agent_even_one_killed_outright(agent_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    agent = agent_factory(port)
    keepers = agent.facts["keepers"]
    peer = client(port)
    for keeper in keepers:
        os.kill(keeper, signal.SIGTERM)  # a signal to the pod's processes is not the end of the agent
        os.kill(keeper, signal.SIGINT)
    peer.set("still", "served")
    assert client(port).get("still") == b"served"
    assert client(agent.facts["workers_port"]).get("written-by") == b"rank 0 agent"
    agent.process.kill()  # the pod is lost
    agent.process.wait(timeout=PATIENCE_S)
    for keeper in keepers:
        assert wait_until(lambda keeper=keeper: not alive(keeper), PATIENCE_S), (
            f"the keeper of a dead agent still runs after {PATIENCE_S:g} s")
    for store_port in (port, agent.facts["workers_port"]):
        assert wait_until(lambda store_port=store_port: refused(store_port), PATIENCE_S), (
            f"a dead agent's store still takes connections after {PATIENCE_S:g} s")
    with pytest.raises(RuntimeError):
        peer.get("still")


def test_the_stores_end_with_the_block(agent_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    agent = agent_factory(port)
    assert len(agent.facts["keepers"]) == 2
    assert agent.say() == "block left"
    assert not any(alive(keeper) for keeper in agent.facts["keepers"])
    assert refused(port)
    assert refused(agent.facts["workers_port"])


def test_a_store_handed_over_outlives_the_block_and_dies_with_its_agent(agent_factory) -> None:  # type: ignore[no-untyped-def]
    """A patch raised after the keeper started (the pod falls back to upstream's launch): a peer that
    already reached the store keeps it, and upstream's agent finds the port taken and connects."""
    port = free_port()
    agent = agent_factory(port, mode="hand-over")
    (keeper,) = agent.facts["keepers"]
    peer = client(port)
    assert agent.say() == "block left"
    assert alive(keeper)
    peer.set("after", "the block")
    assert client(port).get("written-by") == b"agent" and client(port).get("after") == b"the block"
    agent.process.kill()
    agent.process.wait(timeout=PATIENCE_S)
    assert wait_until(lambda: not alive(keeper), PATIENCE_S), f"the keeper outlived its agent by {PATIENCE_S:g} s"


def test_spawning_agent_serves_its_stores_itself_as_torch_does(agent_factory) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    facts = agent_factory(port, "spawn").facts
    assert facts["keepers"] == []
    assert store_threads(facts["threads"]), facts["threads"]
    assert facts["agent_listens"] is True
    assert process_listens_on(facts["agent"], facts["workers_port"])


def test_a_port_another_process_listens_on_is_left_to_it(agent_factory) -> None:  # type: ignore[no-untyped-def]
    """As with several pods on one machine: the first to bind hosts, the others connect."""
    port = free_port()
    first = agent_factory(port)
    second = agent_factory(port, mode="store-only")
    assert len(first.facts["keepers"]) == 2
    assert second.facts["keepers"] == []
    assert second.facts["agent_listens"] is False
    assert not store_threads(second.facts["threads"])
    assert client(port).get("written-by") == b"agent"


def test_binding_a_taken_port_answers_none() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        assert bind_listener(holder.getsockname()[1]) is None
    port = free_port()
    listener = bind_listener(port)
    assert listener is not None
    listener.close()


def test_the_block_without_a_keeper_changes_nothing() -> None:
    with stores_kept("spawn", "c10d", "127.0.0.1:29500", None) as kept:
        assert kept is None


def test_a_keeper_that_cannot_serve_leaves_the_store_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keeper fails before it serves: the agent gets None (torch hosts as it always did), the port is free."""

    def no_server(*args: object) -> None:
        raise RuntimeError("no server here")

    monkeypatch.setattr(store_keeper, "_run_keeper", no_server)
    port = free_port()
    assert store_keeper.start_keeper(port) is None
    listener = bind_listener(port)
    assert listener is not None
    listener.close()
