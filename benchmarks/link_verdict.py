"""A closed peer link is evidence, not a verdict: how fast a killed pod is named, and that a cut link names no one.

Run by hand: ``.venv/bin/python -m benchmarks.link_verdict [--trials 20]``.

Each trial starts a watched pod (a real process running the real
:class:`~rootcause_engine.agent.peer_watch.PeerWatch`, default heartbeat 0.5 s and ``lost_after_s``
5 s) and its watcher (this process, the same defaults) on one real ``TCPStore``, and waits until the
watcher's link to the pod is made. Then, alternately:

- **kill**: the pod is SIGKILLed (its link closes and its heartbeat stops): printed, the time from
  the kill to the watcher's verdict (it must come in about a heartbeat or two, not ``lost_after_s``);
- **cut**: the pod shuts down its end of the link and lives on (a proxy's idle timeout, a conntrack
  flush): printed, the time until the watcher made the link again, and any verdict within
  ``lost_after_s`` (there must be none).
"""

from __future__ import annotations

import argparse
import datetime
import random
import statistics
import subprocess
import sys
import time

from torch.distributed import TCPStore

from rootcause_core.liveness import SILENCE_LIMIT_S
from rootcause_core.testimony import LostPod
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound

#: The watched pod (group rank 1 of 2, default settings); "cut" on stdin shuts down its end of every
#: link its watchers hold and answers "cut".
_POD = """
import datetime, socket, sys
from torch.distributed import TCPStore
from rootcause_engine.agent.peer_link import link_hub
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.torch_elastic import JoinedRound
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=30),
                 wait_for_workers=False)
peers = PeerWatch("pod-1")
peers.joined(JoinedRound(store, 1, 2, (1,)))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "cut":
        for conn in list(link_hub()._accepted):
            conn.shutdown(socket.SHUT_RDWR)
        print("cut", flush=True)
"""


def _wait(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return bool(condition())


def _linked(peers: PeerWatch) -> object | None:
    current = peers._current()
    link = None if current is None else current.link
    return link if link is not None and link.established and not link.closed else None


def trial(kind: str) -> tuple[float | None, int]:
    """(kill: seconds to the verdict; cut: seconds until the link was made again; None if never), verdicts."""
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
    pod = subprocess.Popen([sys.executable, "-c", _POD, str(server.port)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    told: list[tuple[float, tuple[LostPod, ...]]] = []
    store = TCPStore("127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=30),
                     wait_for_workers=False)
    peers = PeerWatch("pod-0")
    peers.when_a_peer_is_lost(lambda lost: told.append((time.monotonic(), lost)))
    try:
        assert pod.stdout is not None and pod.stdin is not None and pod.stdout.readline().strip() == "ready"
        peers.joined(JoinedRound(store, 0, 2, (0,)))
        if not _wait(lambda: _linked(peers) is not None, 30):
            raise RuntimeError("the link was never made")
        time.sleep(2.0 + random.uniform(0, 0.5))  # a few beats of a healthy job, then the fault at any phase
        if kind == "kill":
            started = time.monotonic()
            pod.kill()
            _wait(lambda: bool(told), 3 * SILENCE_LIMIT_S)
            return (told[0][0] - started if told else None), len(told)
        first = _linked(peers)
        pod.stdin.write("cut\n")
        pod.stdin.flush()
        started = time.monotonic()
        assert pod.stdout.readline().strip() == "cut"
        again = _wait(lambda: _linked(peers) not in (None, first), SILENCE_LIMIT_S)
        relinked = time.monotonic() - started if again else None
        time.sleep(max(0.0, SILENCE_LIMIT_S - (time.monotonic() - started)))
        return relinked, len(told)
    finally:
        peers.close()
        pod.kill()
        pod.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="trials of each kind")
    args = parser.parse_args()
    results: dict[str, list[tuple[float | None, int]]] = {"kill": [], "cut": []}
    for _ in range(args.trials):
        for kind in ("kill", "cut"):
            results[kind].append(trial(kind))
    for kind, label in (("kill", "kill -> verdict"), ("cut", "cut -> link made again")):
        times = sorted(t for t, _ in results[kind] if t is not None)
        missing = sum(t is None for t, _ in results[kind])
        verdicts = sum(v for _, v in results[kind])
        summary = (f"median {statistics.median(times):.2f} s, max {times[-1]:.2f} s" if times else "none")
        print(f"{kind}: {len(results[kind])} trials; {label}: {summary}; never: {missing}; verdicts: {verdicts}")


if __name__ == "__main__":
    main()
