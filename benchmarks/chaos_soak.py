"""No false verdicts under chaos: healthy 3- and 4-pod jobs, one after another, with the faults a
healthy job meets in production injected at random moments (issue 50).

Run by hand (as root: pid namespaces, ``ss -K``): ``.venv/bin/python -m benchmarks.chaos_soak
[--minutes 30] [--steps 400] [--step-s 0.1] [--max-pause-s 2.5] [--gap-s 1 6] [--clock-steps 2]
[--load 0] [--seed 0]``.

Jobs alternate ``chaos_train_3x1`` and ``chaos_train_4x1`` (``rootcause_harness/flytekit/chaos_training.py``:
default settings, heartbeat 0.5 s, ``lost_after_s`` 5 s, ``hang_after_s`` 60 s, hard restarts with
``max_restarts=2``), each pod the real entrypoint in a pid namespace of its own. Into each job:

- agent pause: every ``--gap-s`` (uniform) either a pause or a link reset, on a random pod. A pause
  SIGSTOPs the pod's agent process (its main process; the store host's store with it) for a random
  time up to ``--max-pause-s`` (half of ``lost_after_s``), then SIGCONTs it: a long GC, a starved agent;
- link reset: every TCP connection of the pod's peer links (the one its watcher holds to its
  listener, the one it holds to its successor's) is destroyed with ``ss -K`` (the kernel's
  ``SOCK_DESTROY``: the end destroyed reads ECONNABORTED, the other end gets a RST), as a proxy's idle
  timeout, a conntrack flush or a middlebox's reset does;
- wall-clock steps: one random pod's wall clock steps by +-90 s ``--clock-steps`` times at random
  moments of the job (``rootcause_harness/skewed_clock``: ``ROOTCAUSE_SIM_CLOCK_STEPS``, every process
  of the pod at once; the offset stays within +-90 s), as NTP stepping a node's clock does;
- worker restart that reuses a pid: worker 0 of a random pod raises once at a random step; torch's
  agents restart every worker, and each pod's agent hands its restarted worker the pid its earlier
  worker had (``ns_last_pid``, ``rootcause_harness/chaos.py``).

A job passes when the operator's phase is Succeeded, the console reads its outputs, no error
document is in the output prefix, and no pod's log has a verdict: a pod declared lost, a store host
lost, a link lost, a rank hung, a pod that found itself cut off, the agent watchdog's exit.
Printed: jobs run, per fault kind the number injected (and what the pods showed of it), false
verdicts, failed jobs. Pod logs of every job stay under the printed folder.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import random
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from backend_reader.upstream_rule import UpstreamReadError, earliest_error
from benchmarks.cpu_load import busy_processes
from rootcause_harness.chaos import PID_REUSE_LINE, own_pid_namespace
from rootcause_harness.faults import SKEWED_CLOCK_DIR
from rootcause_harness.flytekit.chaos_training import chaos_train_3x1, chaos_train_4x1
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobResult, JobSpec, StoreAccess, run_job
from rootcause_harness.soft_training_loop import read_worker_logs

#: What the engine logs when it reaches a verdict against a pod (``peer_watch.py``, ``hang_watch.py``,
#: ``watchdog.py``): in a healthy job, every one is false.
VERDICTS = {
    "declared lost": re.compile(r"peer watch: .*declared lost"),
    "store host lost": re.compile(r"rendezvous store stopped answering: its host .* is lost"),
    "link lost": re.compile(r"only the network link between this pod and .* was lost"),
    "hung": re.compile(r"hang watch: rank .* is hung"),
    "cut off": re.compile(r"declares no one lost"),
    "watchdog exit": re.compile(r"Writing the root cause and exiting"),
}
#: A pod that lost contact with a peer and asked the isolation gate: no verdict yet, but a suspicion
#: in a healthy job (counted, and its lines printed).
SUSPICION = re.compile(r"isolation gate: lost contact with")
#: What the peer watch logs when a link closed while its peer lived: not a verdict, the link made again.
LINK_REMADE = re.compile(r"peer watch: the connection to .* closed.*connecting again")
CLOCK_STEP_S = 90
#: Each pod's agent gets its own pid in its namespace (torch's rendezvous tells nodes apart by host and pid).
FIRST_PID = 1000


@dataclasses.dataclass
class Tally:
    """Counts over the whole soak."""

    injected: Counter[str] = dataclasses.field(default_factory=Counter)
    seen: Counter[str] = dataclasses.field(default_factory=Counter)
    verdicts: list[str] = dataclasses.field(default_factory=list)
    suspicions: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    jobs: Counter[int] = dataclasses.field(default_factory=Counter)
    longest_pause_s: float = 0.0


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _agent_of(main_pid: int, within_s: float = 60.0) -> int | None:
    """The pod's agent: ``unshare`` -> the namespace's init shell -> the entrypoint (its agent)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for shell in _children(main_pid):
            agents = _children(shell)
            if agents:
                return agents[0]
        time.sleep(0.05)
    return None


def _rendezvous_port(agent: int) -> int | None:
    try:
        environ = Path(f"/proc/{agent}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"PET_RDZV_ENDPOINT="):
            return int(entry.rsplit(b":", 1)[1])
    return None


def _sockets() -> list[tuple[str, int, int, set[int]]]:
    """Every TCP socket of the machine: (state, local port, peer port, owning pids)."""
    out = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True, check=True).stdout
    sockets = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        pids = {int(pid) for pid in re.findall(r"pid=(\d+)", " ".join(parts[5:]))}
        local, peer = (_port(address) for address in parts[3:5])  # a listener's peer is ``*``
        if local is not None:
            sockets.append((parts[0], local, peer or 0, pids))
    return sockets


def _port(address: str) -> int | None:
    port = address.rsplit(":", 1)[-1]
    return int(port) if port.isdigit() else None


def reset_links(agent: int, agents: list[int]) -> int:
    """Destroy the TCP connections of ``agent``'s peer links (both ends), as a middlebox's reset would;
    the number of connections reset (0: no link up right now, e.g. between rendezvous rounds)."""
    sockets = _sockets()
    rendezvous = {_rendezvous_port(pid) for pid in agents}
    listeners = {
        pid: {port for state, port, _, owners in sockets if state == "LISTEN" and pid in owners} - rendezvous
        for pid in agents
    }
    every_listener = set().union(*listeners.values())
    pairs = {
        (local, peer)
        for state, local, peer, owners in sockets
        if state == "ESTAB" and agent in owners and (local in listeners[agent] or peer in every_listener)
    }
    if not pairs:
        return 0
    condition = " or ".join(f"( sport = :{a} and dport = :{b} ) or ( sport = :{b} and dport = :{a} )"
                            for a, b in pairs)
    subprocess.run(["ss", "-K", "-tnH", "state", "established", condition], capture_output=True, check=True)
    return len(pairs)


class Chaos:
    """Pauses and link resets at random moments while one job runs (a thread of its own)."""

    def __init__(self, rng: random.Random, args: argparse.Namespace, tally: Tally) -> None:
        self.rng, self.args, self.tally = rng, args, tally
        self.done = threading.Event()
        self.pods: list[tuple[str, int]] = []
        self.stopped: set[int] = set()
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def started(self, pods: list[tuple[str, int]]) -> None:
        self.pods = pods
        self.thread.start()

    def _run(self) -> None:
        agents = {name: _agent_of(pid) for name, pid in self.pods}
        live = {name: pid for name, pid in agents.items() if pid is not None}
        if not live:
            return
        time.sleep(self.args.settle_s)  # the pods import, start their agents, meet in the rendezvous
        while not self.done.wait(self.rng.uniform(*self.args.gap_s)):
            name = self.rng.choice(sorted(live))
            if self.rng.random() < 0.5:
                self._pause(live[name])
            elif reset_links(live[name], list(live.values())):
                self.tally.injected["link reset"] += 1
            else:
                self.tally.seen["link reset skipped (no link up)"] += 1

    def _pause(self, agent: int) -> None:
        pause_s = self.rng.uniform(0.1, self.args.max_pause_s)
        try:
            os.kill(agent, signal.SIGSTOP)
        except ProcessLookupError:
            return
        self.stopped.add(agent)
        try:
            time.sleep(pause_s)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent, signal.SIGCONT)
            self.stopped.discard(agent)
        self.tally.injected["agent pause"] += 1
        self.tally.longest_pause_s = max(self.tally.longest_pause_s, pause_s)

    def stop(self) -> None:
        """End the chaos; no agent is left stopped, no pod left running (even if the job raised)."""
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(timeout=self.args.max_pause_s + 30)
        for agent in list(self.stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent, signal.SIGCONT)
        for _, pid in self.pods:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def clock_steps(rng: random.Random, count: int, start_ns: int, span_s: float) -> list[tuple[int, int]]:
    """``count`` steps of +-90 s at random moments of ``span_s`` from ``start_ns`` (monotonic), the
    offset kept within +-90 s: from 0 either way, from +-90 back to 0."""
    moments = sorted(start_ns + int(rng.uniform(0.1, 1.0) * span_s * 1e9) for _ in range(count))
    steps, offset = [], 0
    for at in moments:
        step = rng.choice((-CLOCK_STEP_S, CLOCK_STEP_S)) if offset == 0 else -offset
        offset += step
        steps.append((at, step * 1_000_000_000))
    return steps


def _clock_jumps(result: JobResult, pod: str) -> int:
    """How many times the wall clock the pod's workers stamped their steps with jumped by over 60 s
    (what the clock steps did, seen from inside the pod)."""
    jumps = 0
    for (name, _), processes in read_worker_logs(result.sim_dir).items():
        if name != pod:
            continue
        for events in processes:
            stamps = [float(event["t"]) for event in events]  # type: ignore[arg-type]
            jumps += sum(abs(later - earlier) > 60 for earlier, later in itertools.pairwise(stamps))
    return jumps


def judge(result: JobResult, tally: Tally, label: str) -> None:
    """Count what the job showed; a failed job or a verdict is recorded with its pod log lines."""
    problems = []
    if result.timed_out:
        problems.append("timed out")
    view = console_at_decision(result)
    if not result.operator.succeeded or view.outcome != "success":
        problems.append(f"{view.line()} outcome={view.outcome} {view.message[:300]}")
    try:
        error = earliest_error(result.output_prefix, result.spec.store.filesystem())
    except UpstreamReadError as failure:
        problems.append(f"error document unreadable: {failure}")
    else:
        if error is not None:
            tally.verdicts.append(f"{label}: error document naming {error.worker}: {error.message[:300]}")
    for log in sorted(result.sim_dir.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            for kind, pattern in VERDICTS.items():
                if pattern.search(line):
                    tally.verdicts.append(f"{label}: {log.stem}: {kind}: {line.strip()[:400]}")
            tally.seen["link made again"] += bool(LINK_REMADE.search(line))
            if SUSPICION.search(line):
                tally.suspicions.append(f"{label}: {log.stem}: {line.strip()[:400]}")
            if PID_REUSE_LINE in line:
                tally.seen["pods whose workers restarted"] += 1
                tally.seen["of them with an earlier worker's pid"] += not line.rstrip().endswith("reused []")
    if problems:
        tally.failed.append(f"{label}: " + "; ".join(problems))


def run_one(index: int, rng: random.Random, args: argparse.Namespace, root: Path, tally: Tally) -> None:
    nnodes = 3 if index % 2 == 0 else 4
    task = chaos_train_3x1 if nnodes == 3 else chaos_train_4x1
    names = [f"train-worker-{i}" for i in range(nnodes)]
    skewed, failing = rng.choice(names), rng.choice(names)
    fail_step = int(rng.uniform(0.2, 0.8) * args.steps)
    start_ns = time.monotonic_ns()
    steps = clock_steps(rng, args.clock_steps, start_ns, args.expected_job_s)
    pythonpath = os.pathsep.join(p for p in (str(SKEWED_CLOCK_DIR), os.environ.get("PYTHONPATH", "")) if p)
    clock_env = {"PYTHONPATH": pythonpath, "ROOTCAUSE_SIM_CLOCK_STEPS": ",".join(f"{at}:{step}" for at, step in steps)}
    chaos = Chaos(rng, args, tally)
    spec = JobSpec(
        task=task, nnodes=nnodes, nproc_per_node=1, store=StoreAccess(str(root / "store")),
        inputs={"steps": args.steps, "step_s": args.step_s, "fail_pod": failing, "fail_step": fail_step},
        timeout_s=args.job_timeout_s, extra_pod_env={skewed: clock_env},
        pod_wrapper=lambda name, command: own_pid_namespace(command, FIRST_PID * (names.index(name) + 1)),
        on_pods_started=chaos.started,
    )
    try:
        result = run_job(spec, work_dir=root / "pods")
    finally:
        chaos.stop()
    ended_ns = time.monotonic_ns()
    tally.jobs[nnodes] += 1
    tally.injected["clock step"] += sum(at < ended_ns for at, _ in steps)
    tally.seen["clock jumps stamped"] += _clock_jumps(result, skewed)
    faulted = any(event["event"] == "fault" for processes in read_worker_logs(result.sim_dir).values()
                  for events in processes for event in events)
    tally.injected["worker restart"] += faulted
    label = f"job {index} ({nnodes} pods, {result.sim_dir})"
    judge(result, tally, label)
    took = (ended_ns - start_ns) / 1e9
    print(f"{label}: {took:.0f} s, {console_at_decision(result).line()}, clock of {skewed} stepped "
          f"{[step // 1_000_000_000 for _, step in steps]}, {failing} failed at step {fail_step}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="no new job starts after this")
    parser.add_argument("--steps", type=int, default=400, help="training steps per job")
    parser.add_argument("--step-s", type=float, default=0.1, help="sleep per step")
    parser.add_argument("--max-pause-s", type=float, default=2.5, help="half of lost_after_s by default")
    parser.add_argument("--gap-s", type=float, nargs=2, default=(1.0, 6.0), help="between pauses and resets")
    parser.add_argument("--clock-steps", type=int, default=2, help="wall-clock steps per job, in one pod")
    parser.add_argument("--expected-job-s", type=float, default=90.0, help="clock steps fall in this span")
    parser.add_argument("--settle-s", type=float, default=10.0, help="no pause or reset before this")
    parser.add_argument("--job-timeout-s", type=float, default=600.0)
    parser.add_argument("--load", type=int, default=0, help="busy processes competing for the CPU")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rootcause-chaos-"))
    rng, tally = random.Random(args.seed), Tally()
    end = time.monotonic() + 60 * args.minutes
    index = 0
    with busy_processes(args.load):
        while time.monotonic() < end:
            run_one(index, rng, args, root, tally)
            index += 1
    print(f"{sum(tally.jobs.values())} jobs ({tally.jobs[3]} of 3 pods, {tally.jobs[4]} of 4), {args.minutes:g} min, "
          f"{args.load} busy processes; logs in {root}")
    print("injected: " + json.dumps(dict(tally.injected)) + f" (longest pause {tally.longest_pause_s:.2f} s)")
    print("seen in the pods: " + json.dumps(dict(tally.seen)))
    print(f"false verdicts: {len(tally.verdicts)}; failed jobs: {len(tally.failed)}; "
          f"isolation gate asked (no verdict by itself): {len(tally.suspicions)}")
    for line in tally.verdicts + tally.failed + tally.suspicions:
        print("  " + line)


if __name__ == "__main__":
    main()
