"""Teardown after the first failure: SIGTERM, ``teardown_grace_s``, then SIGKILL, on both launch paths.

Real torch elastic launches: the function path (``MultiprocessContext``, whose
``torch.multiprocessing`` join would otherwise wait a hard-coded 30 s) and the binary path
(``SubprocessContext``), each with a worker that ignores SIGTERM. The death watcher's exit time of
that worker must come at least the grace period after the teardown start the observer noted, and
the worker must have died by SIGKILL: the agent's doing, as nothing else signals it. That it was
our grace and not torch's hard-coded 30 s shows as an exit before those 30 s had passed; how close
to the grace the kill comes is a speed figure, measured by ``benchmarks/teardown.py``, not here.
"""

from __future__ import annotations

import signal
import sys
import uuid
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from flytekitplugins_rootcause.exceptions import RootCauseDetails
from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.death_watcher import DeathWatcher
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_observer import LaunchObserver, observing_launch
from tests.watchdog_tasks import binary_worker, launch_workers, tasks

pytestmark = pytest.mark.slow

GRACE_S = 1.5
#: torch's own wait between SIGTERM and SIGKILL on the function path, whatever it is told.
TORCH_TEARDOWN_WAIT_S = 30.0
FAILING_RANK = 1
IGNORING_RANK = 0


def _config(monitor_interval: float = 0.1) -> LaunchConfig:
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        run_id=f"teardown-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=monitor_interval,
        start_method="spawn",
    )


def _signal_of(observer: LaunchObserver, worker: LaunchedWorker) -> int | None:
    """The signal that ended ``worker``: the watcher's reading, else torch's handle (torch may reap first)."""
    exit_ = observer.ends.exit_of(worker)
    if exit_ is not None and exit_.signal_number is not None:
        return exit_.signal_number
    code = observer.ends.torch_exitcode(worker)
    return -code if code is not None and code < 0 else None


def _assert_killed_after_grace(observer: LaunchObserver) -> None:
    (ignoring,) = [w for w in observer.ledger.workers_of(0) if w.global_rank == IGNORING_RANK]
    exit_ = observer.ends.exit_of(ignoring)
    teardown_ns = observer.ledger.teardown_of(0).began_ns
    assert exit_ is not None and teardown_ns is not None
    assert _signal_of(observer, ignoring) == signal.SIGKILL
    lived_s = (exit_.exit_ns - teardown_ns) / 1e9
    # not before the grace had passed (0.1 s: wall clock here, torch waits on the monotonic one),
    # and by our grace, not after torch's 30 s
    assert GRACE_S - 0.1 <= lived_s < TORCH_TEARDOWN_WAIT_S, f"SIGKILLed {lived_s:.3f} s after teardown began"


def test_function_launch_kills_a_sigterm_ignoring_worker_after_the_grace(tmp_path: Path) -> None:
    with DeathWatcher() as watcher:
        observer = LaunchObserver(watcher, teardown_grace_s=GRACE_S)
        with observing_launch(observer), pytest.raises(ChildFailedError) as excinfo:
            elastic_launch(_config(), entrypoint=launch_workers.fail_while_peer_ignores_sigterm)(
                str(tmp_path), FAILING_RANK
            )
        _assert_killed_after_grace(observer)
    # torch's own report still names the worker that failed, not the one it tore down
    assert set(excinfo.value.failures) == {FAILING_RANK}


def test_binary_launch_kills_a_sigterm_ignoring_worker_after_the_grace(tmp_path: Path) -> None:
    with DeathWatcher() as watcher:
        observer = LaunchObserver(watcher, teardown_grace_s=GRACE_S)
        with observing_launch(observer), pytest.raises(ChildFailedError) as excinfo:
            elastic_launch(_config(), entrypoint=sys.executable)(
                binary_worker.__file__, str(tmp_path), str(FAILING_RANK)
            )
        _assert_killed_after_grace(observer)
    assert excinfo.value.failures[FAILING_RANK].exitcode == 3


def _root_cause_details(excinfo: pytest.ExceptionInfo[BaseException]) -> RootCauseDetails:
    seen: BaseException | None = excinfo.value
    while seen is not None:
        if isinstance(seen, RootCauseDetails):
            return seen
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "value", None)
    raise AssertionError(f"no root-cause error in {excinfo.value!r}")


def test_task_tears_down_with_its_grace_and_reports_the_killed_worker_as_victim(tmp_path: Path) -> None:
    with pytest.raises(Exception) as excinfo:
        tasks.fails_while_peer_ignores_sigterm(marker_dir=str(tmp_path))
    error = _root_cause_details(excinfo)
    root, victim = error.failures
    assert (root.global_rank, root.role, root.time_source) == (1, Role.CANDIDATE, TimeSource.RECORDED)
    assert (victim.global_rank, victim.role, victim.signal_name) == (0, Role.VICTIM, "SIGKILL")
    # the victim outlived the root cause by the grace period (at least), not by torch's 30 s
    lived_s = (victim.timestamp_ns - root.timestamp_ns) / 1e9
    assert tasks.TEARDOWN_GRACE_S <= lived_s < TORCH_TEARDOWN_WAIT_S, f"victim died {lived_s:.3f} s after the cause"
