"""The hang watch times every wait on a monotonic clock (issue 50): a wall clock that steps on the
node, or a peer pod's wall clock that is off, neither makes a short wait look long nor a long one short.

Real processes: workers whose progress beacons run (``clocked_pods.worker``), agents' hang watches
(``clocked_pods.pod``, and this process's), and a ``TCPStore`` between the pods; the harness's
``skewed_clock`` steps or offsets the wall clock of every process of the pod under test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from rootcause_core.collectives import CollectivePosition
from rootcause_engine.agent.diagnosis.stalled_rank import (
    PeerWait,
    ProgressTrack,
    stalled_rank_verdict,
    waits_from_text,
    waits_text,
)
from rootcause_engine.agent.hang_watch import HangSettings, HangWatch
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.worker_progress import Usage
from rootcause_engine.store_layout import hang_wait_key
from rootcause_engine.worker.progress_beacon import BeaconReading, GroupProgress
from tests import REPO_ROOT
from tests.rootcause_engine.agent.clocked_pods import LOOK_S, Ledger, Peers, still_beacon

S = 1_000_000_000
ROOT = REPO_ROOT
SKEWED_CLOCK_DIR = ROOT / "rootcause_harness" / "skewed_clock"
AFTER_S = 3.0
#: Long enough for the agent process to import the engine before the step (measured: 2 s, and 7 s on a
#: 2-core machine with 6 busy processes).
START_AFTER_S = 10
#: How much later than its true length a wait may be seen to reach ``AFTER_S`` (beats of 0.1 s,
#: looks of 0.2 s, a busy machine).
LATE_S = 2.5


def _start(processes: list[subprocess.Popen[str]], args: list[str], clock: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, **clock,
           "PYTHONPATH": os.pathsep.join([str(SKEWED_CLOCK_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    processes.append(process)
    return process


def _role(processes: list[subprocess.Popen[str]], role: str, config: dict[str, Any],
          clock: dict[str, str]) -> subprocess.Popen[str]:
    return _start(processes, ["-m", "tests.rootcause_engine.agent.clocked_pods", role, json.dumps(config)], clock)


def _still(processes: list[subprocess.Popen[str]], tmp_path: Path, name: str,
           clock: dict[str, str]) -> dict[str, Any]:
    process = _start(processes, ["-c", "import time; time.sleep(600)"], clock)
    error_file = str(tmp_path / name / "error.json")
    still_beacon(error_file, process.pid)
    return {"pid": process.pid, "error_file": error_file}


def _verdicts(looks: list[dict[str, Any]], pid: int, entered_at: int) -> list[tuple[float, float]]:
    """(how long the wait truly lasted at the look, the waited_s of its verdict) for each look that named ``pid``."""
    return [((look["at"] - entered_at) / S, look["found"][str(pid)]) for look in looks if str(pid) in look["found"]]


def _check_timed_by_its_true_length(verdicts: list[tuple[float, float]]) -> None:
    assert verdicts, "the still rank was never named, though its peer waited longer than after_s"
    lasted, waited = verdicts[0]
    assert lasted >= AFTER_S - 0.3, f"named when the wait had lasted {lasted:.1f} s only ({waited:.1f} s said)"
    assert lasted <= AFTER_S + LATE_S, f"named only when the wait had lasted {lasted:.1f} s"
    assert AFTER_S <= waited <= lasted + 0.5, (lasted, waited)


def test_a_wall_clock_step_on_the_node_does_not_make_a_short_wait_a_hang(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    """Rank 1 enters collective 5, which rank 0 (asleep) never enters; 1.5 s later NTP steps the
    node's wall clock 100 s ahead, in every process of the pod. The wait lasted 1.5 s, not 101.5:
    rank 0 is named only once it truly lasted ``after_s``, with that length."""
    for attempt, start_after_s in enumerate((START_AFTER_S, 4 * START_AFTER_S)):
        run = _step_during_a_wait(tmp_path / f"attempt-{attempt}", processes, start_after_s)
        if run is not None:
            break
        for process in processes:  # the pod started after its moments: again, with more time
            process.kill()
            process.wait()
        processes.clear()
    else:
        pytest.fail(f"the pod's processes took over {4 * START_AFTER_S} s to start, twice")
    looks, entered_at, still_pid = run
    assert round(looks[-1]["wall_ahead_s"]) == 100  # the clock stepped
    _check_timed_by_its_true_length(_verdicts(looks, still_pid, entered_at))


def _step_during_a_wait(tmp_path: Path, processes: list[subprocess.Popen[str]],
                        start_after_s: float) -> tuple[list[dict[str, Any]], int, int] | None:
    """The pod of the test above, its clock stepped ``start_after_s`` from now: the agent's looks, when
    rank 1 entered, rank 0's pid; ``None`` when a process started too late for the step to fall within
    the wait (the waiting rank after its moment, the agent after the step)."""
    step_at = time.monotonic_ns() + int(start_after_s * S)
    entered_at = step_at - int(1.5 * S)
    clock = {"ROOTCAUSE_SIM_CLOCK_STEPS": f"{step_at}:{100 * S}"}
    still = _still(processes, tmp_path, "worker-0", clock)
    waiting_file = tmp_path / "worker-1" / "error.json"
    waiting_file.parent.mkdir(parents=True)
    began_waiting = tmp_path / "worker-1" / "waiting-since"
    waiting = _role(processes, "worker", {"error_file": str(waiting_file), "enter_at": entered_at,
                                          "ready_file": str(began_waiting)}, clock)
    agent = _role(processes, "pod", {
        "workers": [{**still, "rank": 0}, {"pid": waiting.pid, "rank": 1, "error_file": str(waiting_file)}],
        "after_s": AFTER_S, "until": entered_at + int((AFTER_S + LATE_S + 1) * S), "name": "pod-0",
    }, clock)
    out, _ = agent.communicate(timeout=120 + start_after_s)
    assert agent.returncode == 0
    looks = json.loads(out.strip().splitlines()[-1])["looks"]
    since = began_waiting.read_text() if began_waiting.exists() else ""  # not yet written: not waiting yet
    waiting_in_time = since.isdigit() and int(since) < entered_at
    if not waiting_in_time or not looks or round(looks[0]["wall_ahead_s"]) != 0:
        return None
    return looks, entered_at, still["pid"]


@pytest.mark.parametrize("peer_ahead_s", [-90, 90], ids=["peer-clock-90s-behind", "peer-clock-90s-ahead"])
def test_a_peer_pod_s_skewed_wall_clock_neither_lengthens_nor_shortens_its_waits(
    tmp_path: Path, processes: list[subprocess.Popen[str]], server_port: int, peer_ahead_s: int
) -> None:
    """Pod 1, whose wall clock is ``peer_ahead_s`` off this pod's, has rank 2 waiting in collective 5
    and says so in the store; this pod's rank 0 (asleep) never entered it. Rank 0 is named once the
    wait truly lasted ``after_s``: not 90 s early, not 90 s late."""
    ready, enter, stop = (str(tmp_path / name) for name in ("peer-ready", "enter", "stop"))
    skewed = {"ROOTCAUSE_SIM_CLOCK_OFFSET_NS": str(peer_ahead_s * S)}
    waiting_file = str(tmp_path / "pod-1-worker-0" / "error.json")
    Path(waiting_file).parent.mkdir()
    waiting = _role(processes, "worker", {"error_file": waiting_file, "enter_file": enter}, skewed)
    peer = _role(processes, "pod", {
        "workers": [{"pid": waiting.pid, "rank": 2, "error_file": waiting_file}], "port": server_port,
        "group_rank": 1, "world_size": 2, "after_s": AFTER_S, "ready_file": ready, "stop_file": stop,
        "name": "pod-1",
    }, skewed)
    still = _still(processes, tmp_path, "pod-0-worker-0", {})
    peers = Peers(dist.TCPStore("127.0.0.1", server_port, is_master=False), 0, 2)
    watch = HangWatch(Ledger([LaunchedWorker(0, 0, 0, 0, still["pid"], still["error_file"])]),
                      peers, HangSettings(after_s=AFTER_S), worker_name="pod-0")  # type: ignore[arg-type]
    started = time.monotonic()
    while not Path(ready).exists() or time.monotonic() < started + AFTER_S:
        # the peer pod's agent looks (it imports the engine first); this one's too: its rank is still
        assert peer.poll() is None and time.monotonic() < started + 120
        assert watch.look() == {}
        time.sleep(LOOK_S)
    entered_at = time.monotonic_ns()
    Path(enter).touch()  # rank 2 enters collective 5 now
    looks = []
    while time.monotonic_ns() < entered_at + int((AFTER_S + LATE_S + 2) * S):
        found = watch.look()
        looks.append({"at": time.monotonic_ns(), "found": {str(pid): v.waited_s for pid, v in found.items()}})
        time.sleep(LOOK_S)
    Path(stop).touch()
    out, _ = peer.communicate(timeout=60)
    assert peer.returncode == 0
    peer_looks = json.loads(out.strip().splitlines()[-1])["looks"]
    assert round(peer_looks[-1]["wall_ahead_s"]) == peer_ahead_s  # the peer's clock was off
    _check_timed_by_its_true_length(_verdicts(looks, still["pid"], entered_at))


# --- the parts, without processes ------------------------------------------------------------------

NOW = 1_800_000_000 * S
MONO = 5_000 * S


def _wait(rank: int, seq: int, *, wall_age_s: float, mono_age_s: float | None = None) -> PeerWait:
    """A wait of this pod's beacon: entered ``wall_age_s`` ago by the wall clock, ``mono_age_s`` by the monotonic."""
    mono = None if mono_age_s is None else MONO - int(mono_age_s * S)
    return PeerWait(rank, "pod-1", CollectivePosition("0", seq, "gloo:all_reduce", NOW - int(wall_age_s * S),
                                                      entered_mono_ns=mono), since_mono_ns=mono)


class _CountedStore:
    """A ``HashStore`` that counts its writes."""

    def __init__(self) -> None:
        self.store, self.sets = dist.HashStore(), 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def set(self, key: str, value: str) -> None:
        self.sets += 1
        self.store.set(key, value)


def _watch(store: Any, group_rank: int) -> HangWatch:
    return HangWatch(Ledger([]), Peers(store, group_rank, 2), HangSettings(after_s=60.0),  # type: ignore[arg-type]
                     worker_name=f"pod-{group_rank}")


def test_a_local_wait_is_timed_on_the_monotonic_clock_not_from_its_wall_clock_start() -> None:
    """The wall clock stepped 100 s ahead after rank 1 entered collective 5: 10 s by the monotonic clock."""
    wait = _wait(1, 5, wall_age_s=110, mono_age_s=10)
    assert wait.waited_s(NOW, MONO) == 10
    assert wait.waited_s(NOW) == 110  # no monotonic now: the wall clock, as before
    beacon = BeaconReading(42, NOW, 0, (GroupProgress("0", 4, 4),))
    still = ProgressTrack(Usage(0, NOW, 1.0, 0, "S"), 0, Usage(100, NOW, 1.0, 0, "S"))
    assert stalled_rank_verdict(0, beacon, still, [wait], after_s=60, now_ns=NOW, now_mono_ns=MONO) is None
    longer = _wait(2, 5, wall_age_s=61, mono_age_s=70)
    verdict = stalled_rank_verdict(0, beacon, still, [wait, longer], after_s=60, now_ns=NOW, now_mono_ns=MONO)
    assert verdict is not None and [w.rank for w in verdict.waits] == [2] and verdict.waited_s == 70


def test_a_published_wait_says_how_long_it_lasted_when_first_published_and_the_text_changes_with_the_set_only() -> None:
    store = _CountedStore()
    watch = _watch(store, 1)
    round_store = watch.peers.round_store()  # type: ignore[union-attr]
    first = _wait(2, 5, wall_age_s=500, mono_age_s=31)  # the wall clock says 500 s: not what is published
    watch._publish(round_store, [first], NOW, MONO)
    [said] = waits_from_text(store.get(hang_wait_key(1)))
    assert said.published_waited_s == 31 and said.position.entered_mono_ns is None  # the host's moment stays here
    for later_s in (2, 4, 6):
        watch._publish(round_store, [first], NOW + later_s * S, MONO + later_s * S)
    assert store.sets == 1  # the same set of waits: nothing written again
    second = _wait(3, 5, wall_age_s=30.5, mono_age_s=30.5)
    watch._publish(round_store, [first, second], NOW + 8 * S, MONO + 8 * S)
    assert store.sets == 2
    assert [w.published_waited_s for w in waits_from_text(store.get(hang_wait_key(1)))] == [31, 38.5]
    watch._publish(round_store, [], NOW + 10 * S, MONO + 10 * S)
    watch._publish(round_store, [first], NOW + 12 * S, MONO + 12 * S)  # ended, and said again: a new figure
    assert [w.published_waited_s for w in waits_from_text(store.get(hang_wait_key(1)))] == [43]


def test_a_peer_s_wait_lasts_what_it_said_plus_the_time_since_this_pod_first_read_it() -> None:
    store = dist.HashStore()
    publisher, reader = _watch(store, 1), _watch(store, 0)
    ahead = 90 * S  # the publisher's wall clock: 90 s ahead of the reader's
    publisher._publish(publisher.peers.round_store(),  # type: ignore[union-attr]
                       [_wait(2, 5, wall_age_s=31, mono_age_s=31)], NOW + ahead, MONO)
    round_store = reader.peers.round_store()  # type: ignore[union-attr]
    [wait] = reader._peer_waits(round_store)
    assert wait.published_waited_s == 31 and wait.waited_s(NOW, time.monotonic_ns()) == pytest.approx(31, abs=1)
    mono = 777 * S  # the reader's monotonic clock: another host's, nothing in common with the publisher's
    fresh = _watch(store, 0)
    assert fresh._timed([wait], mono)[0].waited_s(NOW, mono) == 31
    assert fresh._timed([wait], mono + 20 * S)[0].waited_s(NOW, mono + 20 * S) == 51  # read again 20 s later
    said_again = dataclasses.replace(wait, published_waited_s=40.0)  # published anew: timed from this reading
    assert fresh._timed([said_again], mono + 30 * S)[0].waited_s(NOW, mono + 30 * S) == 40
    # an older publisher says no length: its wall-clock start against this node's wall clock (skew and all)
    old = PeerWait(2, "pod-1", CollectivePosition("0", 6, "gloo:all_reduce", NOW + ahead - 31 * S))
    store.set(hang_wait_key(1), waits_text([old]))
    [wait] = reader._peer_waits(round_store)
    assert wait.since_mono_ns is None and wait.waited_s(NOW, time.monotonic_ns()) == pytest.approx(-59)


@pytest.mark.parametrize("forged", [-1, 1e300, float("nan"), True, "31"],
                         ids=["negative", "past-a-year", "nan", "a-bool", "a-string"])
def test_a_published_length_that_is_no_number_of_seconds_costs_its_wait(forged: object) -> None:
    value = _wait(2, 5, wall_age_s=31).to_json()
    assert PeerWait.from_json({**value, "waited_s": forged}) is None
    assert PeerWait.from_json({**value, "waited_s": 31}) == PeerWait(2, "pod-1", _wait(2, 5, wall_age_s=31).position,
                                                                     31.0)
    # a monotonic moment in the store is another host's: never taken
    forged_mono = {**value, "position": {**value["position"], "entered_mono_ns": MONO}}
    parsed = PeerWait.from_json(forged_mono)
    assert parsed is not None and parsed.position.entered_mono_ns is None and parsed.since_mono_ns is None
