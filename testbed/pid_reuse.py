"""A restarted attempt's worker that gets the pid of the attempt before's dead worker, for real.

Run as pid 1 of a pid namespace of its own (:func:`reuse_command`: ``unshare --pid --fork
--mount-proc``, as root): there ``/proc/sys/kernel/ns_last_pid`` is this namespace's, and writing
``pid - 1`` to it makes the next process get ``pid`` again. Attempt 0's worker exits 1 and is reaped;
attempt 1's worker is started with its pid; what the death watcher, the launch record and the
watchdog's hang check then say of attempt 1 is printed as one JSON line.

Run as a script (not ``-m``) so that ``PYTHONPATH`` decides which engine it exercises.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
S = 1_000_000_000
NEVER_S = 60.0


def reuse_command(python: str = sys.executable) -> list[str]:
    """The command line that runs this script in a pid namespace of its own."""
    return ["unshare", "--pid", "--fork", "--mount-proc", python, str(Path(__file__).resolve())]


def _until(condition: Callable[[], T | bool | None], within_s: float = NEVER_S) -> T | None:
    """``condition()``'s first true value, polled; ``None`` after ``within_s``."""
    deadline = time.monotonic() + within_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.005)
    return value  # type: ignore[return-value]


def main() -> dict[str, object]:
    from rootcause_engine.agent.death_watcher import DeathWatcher
    from rootcause_engine.agent.launch_ledger import LaunchedWorker
    from rootcause_engine.agent.launch_observer import LaunchObserver
    from rootcause_engine.agent.watchdog import WatchdogSettings, hang_deadline_ns, is_hung, take_snapshot

    settings = WatchdogSettings(interval_s=1, hang_timeout_s=60, teardown_grace_s=5)
    with DeathWatcher() as watcher:
        observer = LaunchObserver(watcher)
        failed = subprocess.Popen(["/bin/sh", "-c", "exit 1"])
        observer.ledger.add_worker(LaunchedWorker(0, 0, 0, 0, failed.pid, ""))
        old_exit = _until(lambda: watcher.exit_of(failed.pid))
        assert old_exit is not None, "the watcher never saw attempt 0's worker exit"
        failed.wait()  # reaped, as torch's agent does: its pid is free
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(failed.pid - 1))
        restarted = subprocess.Popen(["/bin/sh", "-c", "read line"], stdin=subprocess.PIPE)
        try:
            observer.ledger.add_worker(LaunchedWorker(1, 0, 0, 0, restarted.pid, ""))
            snapshot = take_snapshot(observer)
            later = dataclasses.replace(snapshot, now_ns=snapshot.now_ns + 61 * S)  # a minute on, nothing else
            new_exit = watcher.confirm_exit(restarted.pid)
            attempt_0 = observer.ends.exit_of(observer.ledger.workers_of(0)[0])
            result: dict[str, object] = {
                "reused": restarted.pid == failed.pid,
                "old_exitcode": old_exit.exitcode,
                "attempt_0_exitcode": attempt_0.exitcode if attempt_0 is not None else None,
                "confirmed_exit": new_exit is not None,
                "snapshot_exited": snapshot.exited,
                "snapshot_failed": snapshot.first_failure_ns is not None,
                "deadline": hang_deadline_ns(snapshot, settings),
                "hung_a_minute_later": is_hung(later, settings),
            }
            restarted.send_signal(signal.SIGTERM)  # its own end must be seen, not the old one's
            ended = _until(
                lambda: (seen := watcher.exit_of(restarted.pid)) is not None and seen.exitcode != 1 and seen, 10.0
            )
            result["new_signal"] = ended.signal_number if ended is not None else None
        finally:
            if restarted.poll() is None:
                restarted.kill()
            restarted.wait()
    return result


if __name__ == "__main__":
    if os.getpid() != 1:
        raise SystemExit("run in a pid namespace of its own: " + " ".join(reuse_command()))
    print(json.dumps(main()), flush=True)
