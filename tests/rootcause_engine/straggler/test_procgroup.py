"""The check's own process group (``rootcause_engine/straggler/procgroup.py``): this process as the one rank of
a real gloo world over a loopback ``TCPStore``, made and destroyed around the check, leaving a user's group alone."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import torch
import torch.distributed as dist

from rootcause_engine.straggler.procgroup import REQUIRED_ENV, check_process_group, require_elastic_env
from rootcause_engine.straggler.settings import StragglerConfigError

if TYPE_CHECKING:
    from torch.distributed import TCPStore


def one_rank_env(monkeypatch: pytest.MonkeyPatch, port: int, *, agent_store: bool) -> None:
    """What torch elastic sets for the only worker of a one-node job whose store listens on ``port``."""
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("GROUP_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)),
                        ("TORCHELASTIC_RUN_ID", "run-7"), ("TORCHELASTIC_RESTART_COUNT", "0")):
        monkeypatch.setenv(name, value)
    if agent_store:
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    else:
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)


@pytest.fixture
def agent_store_env(store_server: TCPStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[TCPStore]:
    """The worker's environment with the agent's store (``store_server``) as the workers' store."""
    one_rank_env(monkeypatch, store_server.port, agent_store=True)
    yield store_server
    if dist.is_initialized():  # a failed test leaves no group to the next
        dist.destroy_process_group()


def _all_reduced(value: float) -> float:
    tensor = torch.tensor([value])
    dist.all_reduce(tensor)
    return float(tensor.item())


def test_without_torch_elastic_s_variables_the_check_says_which_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in REQUIRED_ENV:
        monkeypatch.setenv(name, "0")
    monkeypatch.delenv("GROUP_RANK")
    monkeypatch.setenv("MASTER_ADDR", "")  # set but empty counts as missing
    with pytest.raises(StragglerConfigError) as raised:
        require_elastic_env()
    assert str(raised.value) == (
        "the straggler check runs inside torch elastic workers, but GROUP_RANK, MASTER_ADDR are not set; "
        "launch it through an Elastic/ElasticRootCause task or torchrun."
    )
    monkeypatch.setenv("GROUP_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    require_elastic_env()  # all there: no error
    assert REQUIRED_ENV == ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def test_the_check_makes_a_default_group_on_the_agent_s_store_and_destroys_it(agent_store_env: TCPStore) -> None:
    keys_before = agent_store_env.num_keys()
    with check_process_group("gloo", 30) as created:
        assert created is True
        assert (dist.get_world_size(), dist.get_rank(), dist.get_backend()) == (1, 0, "gloo")
        assert _all_reduced(2.5) == 2.5
    assert not dist.is_initialized()
    assert agent_store_env.num_keys() > keys_before  # the group met on the agent's store


def test_a_second_check_and_then_the_user_s_own_group_work_on_the_same_store(agent_store_env: TCPStore) -> None:
    for _ in range(2):
        with check_process_group("gloo", 30) as created:
            assert created and _all_reduced(1.0) == 1.0
    dist.init_process_group("gloo", store=agent_store_env, rank=0, world_size=1)  # the user's own init
    try:
        assert _all_reduced(4.0) == 4.0
    finally:
        dist.destroy_process_group()


def test_an_existing_default_group_is_used_and_left_alone(agent_store_env: TCPStore) -> None:
    dist.init_process_group("gloo", store=agent_store_env, rank=0, world_size=1)
    try:
        users_group = dist.group.WORLD
        with check_process_group("gloo", 30) as created:
            assert created is False and dist.group.WORLD is users_group
        assert dist.is_initialized() and dist.group.WORLD is users_group
        assert _all_reduced(3.0) == 3.0
    finally:
        dist.destroy_process_group()


def test_a_group_that_raises_in_the_block_is_destroyed_all_the_same(agent_store_env: TCPStore) -> None:
    with pytest.raises(RuntimeError, match="peer died"), check_process_group("gloo", 30):
        raise RuntimeError("peer died")
    assert not dist.is_initialized()


def test_without_the_agent_s_store_rank_0_hosts_one_others_can_join(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a free loopback port for rank 0's store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    one_rank_env(monkeypatch, port, agent_store=False)
    with check_process_group("gloo", 30) as created:
        assert created
        visitor = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10),
                                wait_for_workers=False)
        visitor.set("seen", "yes")
        assert visitor.get("seen") == b"yes"
    assert not dist.is_initialized()
