"""A pod the kubelet stops while it waits for rank 0's outputs leaves within the grace.

The wait's bound (``rank_0_outputs_timeout_s``, 120 s by default) outlives the kubelet's 30 s
grace: a pod SIGTERMed there and SIGKILLed at the grace's end exits 137, and the training operator
then marks the whole job Failed with nothing read. A real process with the pod's SIGTERM notice
installed, waiting on a real folder through flytekit's file access, gets a real SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rootcause_engine.agent.rank_0_outputs import STOPPED_WAIT_S, Rank0Outcome, wait_for_rank_0_outputs

_WAITING_POD = """
import sys
from flytekit.core.data_persistence import FileAccessProvider
from flytekitplugins_rootcause.exceptions import Rank0OutputsMissingError
from flytekitplugins_rootcause.rank_0_outputs import OutputPrefix, await_rank_0_outputs
from rootcause_core.pod_stop import POD_STOP
from rootcause_engine.agent.peer_watch import PeerWatch

POD_STOP.install()
prefix = sys.argv[1]
where = OutputPrefix(FileAccessProvider(prefix + "/sandbox", prefix), prefix)
print("waiting", flush=True)
try:
    await_rank_0_outputs(where, PeerWatch("train-worker-1"), timeout_s=120)
except Rank0OutputsMissingError as missing:
    print("missing:", str(missing).replace("\\n", " "), flush=True)
else:
    print("found", flush=True)
"""


def _start_waiting_pod(prefix: Path) -> subprocess.Popen[str]:
    pod = subprocess.Popen([sys.executable, "-c", _WAITING_POD, str(prefix)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert pod.stdout is not None and pod.stdout.readline().strip() == "waiting"
    return pod


@pytest.mark.slow
def test_a_pod_stopped_while_it_waits_writes_its_error_and_exits_0_within_the_grace(tmp_path: Path) -> None:
    pod = _start_waiting_pod(tmp_path)
    time.sleep(1.0)
    stopped = time.monotonic()
    pod.send_signal(signal.SIGTERM)
    out, err = pod.communicate(timeout=60)
    left_after_s = time.monotonic() - stopped

    assert pod.returncode == 0, err[-3000:]
    assert left_after_s < 30, f"still waiting {left_after_s:.1f} s after the SIGTERM: the kubelet's SIGKILL"
    assert "missing:" in out and "The kubelet stopped this pod (SIGTERM) while it waited" in out, out


@pytest.mark.slow
def test_a_pod_stopped_while_it_waits_still_exits_0_when_the_outputs_come_in_time(tmp_path: Path) -> None:
    pod = _start_waiting_pod(tmp_path)
    pod.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    (tmp_path / "outputs.pb").write_bytes(b"")
    out, err = pod.communicate(timeout=60)
    assert pod.returncode == 0 and out.strip().endswith("found"), (out, err[-3000:])


def test_the_stop_cuts_the_wait_to_the_stopped_wait_whatever_the_bound() -> None:
    now = [0.0]
    stop: list[float | None] = [None]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        if now[0] >= 5.0 and stop[0] is None:
            stop[0] = now[0]  # the SIGTERM, 5 s into a 120 s wait

    wait = wait_for_rank_0_outputs(lambda: False, lambda: False, timeout_s=120, stopped_at=lambda: stop[0],
                                   clock=lambda: now[0], sleep=sleep)
    assert wait.outcome is Rank0Outcome.NEITHER and wait.stopped
    assert stop[0] is not None and wait.waited_s == pytest.approx(stop[0] + STOPPED_WAIT_S)
