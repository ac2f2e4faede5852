"""A process group for the check that leaves none behind, so the user's own init still works.

The check may run before the user's ``init_process_group``: it then creates its own default group
on the same rendezvous store, under a key prefix of its own (so a later init, or a second check in
the same process, never reads its keys), and destroys it afterwards. If a default group already
exists, the check uses it and leaves it alone.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist

from rootcause_engine.straggler.settings import StragglerConfigError

_CALLS = itertools.count()

#: Environment torch elastic sets for every worker; the check cannot place itself without it.
REQUIRED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def require_elastic_env() -> None:
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        raise StragglerConfigError(
            "the straggler check runs inside torch elastic workers, but "
            + ", ".join(missing)
            + " are not set; launch it through an Elastic/ElasticRootCause task or torchrun."
        )


def _store(rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # With the agent's store every worker is a client; otherwise rank 0 hosts it, multi-tenant so a
    # later init_process_group in this process shares the same server instead of failing to bind.
    store = dist.TCPStore(
        host,
        port,
        world_size,
        is_master=not agent_store and rank == 0,
        timeout=timeout,
        multi_tenant=True,
    )
    run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"rootcause-straggler/{run}/{attempt}/{next(_CALLS)}/", store)


@contextmanager
def check_process_group(backend: str, timeout_s: float) -> Iterator[bool]:
    """Yield True if the check created the default group (and will destroy it), False if it existed."""
    if dist.is_initialized():
        yield False
        return
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend, store=_store(rank, world_size, timeout), rank=rank, world_size=world_size, timeout=timeout
    )
    try:
        yield True
    finally:
        dist.destroy_process_group()
