"""The launch observer (``agent/launch_observer.py``): the wraps it installs in torch's agent, and what
the parts it feeds learn from a real launch: the ledger's workers and teardown times, and
:class:`~rootcause_engine.agent.worker_ends.WorkerEnds`' reads of torch's own process contexts (only a
launch torch started has them).

Real processes throughout: workers started by torch's own ``start_processes`` (``fork``: no interpreter
start-up) routed through :func:`observing_launch` as torch's agent calls it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from torch.distributed.elastic.agent.server import local_elastic_agent
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_observer import LaunchObserver, observing_launch

NEVER_S = 120.0
#: A configured teardown grace no test waits for.
LONG_GRACE_S = 120.0

pytestmark = pytest.mark.usefixtures("signal_handlers_restored")


# --- workers as torch's agent starts them (module level: the forked workers run them) ----------------


def _return_rank() -> int:
    return int(os.environ["RANK"])


def _local_rank_0_exits_0_without_returning() -> int:
    if os.environ["LOCAL_RANK"] == "0":
        os._exit(0)
    time.sleep(NEVER_S)
    return 1


def _agent_start(tmp_path: Path, entrypoint: Any, args: dict[int, tuple[Any, ...]],
                 envs: dict[int, dict[str, str]]) -> Any:
    """Start workers as torch's ``LocalElasticAgent`` does: through the global of its module."""
    return local_elastic_agent.start_processes(
        name="observed",
        entrypoint=entrypoint,
        args=args,
        envs=envs,
        logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path / "logs")),
        start_method="fork" if callable(entrypoint) else "spawn",
    )


def _envs(attempt: int, group_rank: int, first_rank: int, count: int) -> dict[int, dict[str, str]]:
    return {
        local: {
            "RANK": str(first_rank + local),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(group_rank),
            "TORCHELASTIC_RESTART_COUNT": str(attempt),
        }
        for local in range(count)
    }


def _wait(pcontext: Any) -> Any:
    result = pcontext.wait(timeout=NEVER_S, period=0.02)
    assert result is not None, "torch's workers never finished"
    return result


def _observed_launch(observer: LaunchObserver, tmp_path: Path, entrypoint: Any, args: dict[int, tuple[Any, ...]],
                     envs: dict[int, dict[str, str]]) -> Any:
    """Start the workers within ``observing_launch`` and wait for torch's result of them."""
    with observing_launch(observer):
        pcontext = _agent_start(tmp_path, entrypoint, args, envs)
        try:
            return _wait(pcontext)
        finally:
            pcontext.close()


def test_every_worker_torch_s_agent_starts_is_registered_with_its_ranks_attempt_and_error_file(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """Within ``observing_launch`` torch's agent's ``start_processes`` registers each worker (pid, local,
    global and group rank, the attempt from ``TORCHELASTIC_RESTART_COUNT``, torch's error file); the
    results count as delivered only once torch's poll collected every return value; after the block
    torch's own function is back."""
    original = local_elastic_agent.start_processes
    observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S)
    with observing_launch(observer):
        assert local_elastic_agent.start_processes is not original
        pcontext = _agent_start(tmp_path, _return_rank, {0: (), 1: ()}, _envs(attempt=2, group_rank=1, first_rank=4,
                                                                             count=2))
        try:
            assert observer.ledger.last_attempt() == 2
            workers = observer.ledger.workers_of(2)
            assert {w.pid for w in workers} == set(pcontext.pids().values())
            assert sorted((w.local_rank, w.global_rank, w.group_rank) for w in workers) == [(0, 4, 1), (1, 5, 1)]
            assert {w.local_rank: w.error_file for w in workers} == dict(pcontext.error_files)
            assert observer.ledger.workers_of(0) == []
            result = _wait(pcontext)
        finally:
            pcontext.close()
    assert local_elastic_agent.start_processes is original
    assert result.return_values == {0: 4, 1: 5}
    assert observer.ends.results_delivered(2) is True
    for worker in workers:
        assert observer.ends.torch_exitcode(worker) == 0
        assert not observer.ends.exited_without_result(worker)  # exit 0 after its result was delivered


def test_a_function_worker_exiting_0_before_returning_is_torch_s_failure_and_its_peer_is_ended(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """torch's join would count ``os._exit(0)`` as a success and wait for ever for the other worker; the
    observer's join makes torch report that worker failed, ends the other one (a victim, after the
    teardown began), and says the worker exited without its result."""
    observer = LaunchObserver(watcher, teardown_grace_s=LONG_GRACE_S)
    result = _observed_launch(observer, tmp_path, _local_rank_0_exits_0_without_returning, {0: (), 1: ()},
                              _envs(attempt=0, group_rank=0, first_rank=0, count=2))
    assert result.is_failed() and set(result.failures) == {0}
    assert result.failures[0].exitcode == 0
    early, peer = sorted(observer.ledger.workers_of(0), key=lambda w: w.local_rank)
    assert observer.ends.results_delivered(0) is False
    assert observer.ends.exited_without_result(early)
    teardown_ns = observer.ledger.teardown_of(0).began_ns
    early_exit, peer_exit = observer.ends.exit_of(early), watcher.confirm_exit(peer.pid)
    assert teardown_ns is not None and early_exit is not None and peer_exit is not None
    assert early_exit.exit_ns <= teardown_ns <= peer_exit.exit_ns
    # ended by the teardown's SIGTERM (the forked worker inherits the agent's handler, torch's, so it
    # may exit 1 rather than by the signal): anything but a success
    assert (peer_exit.exitcode, peer_exit.signal_number) != (0, None)
    assert not observer.ends.exited_without_result(peer)  # killed by a signal: no claim about its result
    assert observer.ledger.teardown_of(0).done_ns is not None


def test_a_binary_launch_has_no_results_to_deliver_and_its_exit_codes_are_torch_s(
    tmp_path: Path, watcher: DeathWatcher
) -> None:
    """A binary worker may legitimately exit 0 at any time: never "exited without its result"; the exit
    code is read from torch's own process handle, which reaps it."""
    observer = LaunchObserver(watcher)
    result = _observed_launch(observer, tmp_path, "/bin/sh", {0: ("-c", "exit 0"), 1: ("-c", "exit 5")},
                              _envs(attempt=1, group_rank=0, first_rank=0, count=2))
    assert result.is_failed() and set(result.failures) == {1}
    zero, five = sorted(observer.ledger.workers_of(1), key=lambda w: w.local_rank)
    assert observer.ends.results_delivered(1) is None
    assert (observer.ends.torch_exitcode(zero), observer.ends.torch_exitcode(five)) == (0, 5)
    assert not observer.ends.exited_without_result(zero)
