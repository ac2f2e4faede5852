"""Pod-side parts of the chaos soak (``benchmarks/chaos_soak.py``): a restarted worker that gets a pid
an earlier attempt's worker had, for real.

A pod of the soak runs in a pid namespace of its own (:func:`own_pid_namespace`, ``unshare --pid
--fork --mount-proc``, as a container does), so ``/proc/sys/kernel/ns_last_pid`` is the pod's. Its
first process is a shell (the container's init), its agent that shell's child with a pid of its
own in each pod: torch's rendezvous tells nodes apart by host name and pid, and the pods of this
machine share the host name. :func:`arm_pid_reuse`, called where the soak's task module is imported (in the agent, as
:func:`~rootcause_harness.faults.arm_agent_faults` is), makes torch's agent write the lowest pid
its earlier workers had, less one, there right before it starts a restart's workers: the next
process the pod forks, the restarted worker, gets that pid again (as on a node whose pids wrap
around). Each start prints one :data:`PID_REUSE_LINE` line to the pod's log (the soak counts them).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: Set to 1 in a soak pod: its agent hands a restart's workers the pids of earlier workers.
REUSE_PIDS_VARIABLE = "ROOTCAUSE_SIM_REUSE_PIDS"
#: What :func:`arm_pid_reuse` prints at each start of workers after the first: the pids, and which were reused.
PID_REUSE_LINE = "chaos: restarted workers"
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def own_pid_namespace(args: list[str], first_pid: int) -> list[str]:
    """``args`` run with pid ``first_pid`` in a pid namespace of their own (:data:`REUSE_PIDS_VARIABLE`
    set), with a ``/proc`` of that namespace (the engine reads its workers' ``/proc/<pid>`` by the
    pids it sees), under a shell as pid 1 that waits for them and exits as they did. Needs root."""
    script = f'echo "$0" > {NS_LAST_PID} && {REUSE_PIDS_VARIABLE}=1 "$@"'
    return ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, str(first_pid - 1), *args]


def arm_pid_reuse() -> None:
    """In a soak pod's agent (:data:`REUSE_PIDS_VARIABLE` set, in its pod's pid namespace): before
    torch's agent starts a restart's workers, ``ns_last_pid`` is set so that the first of them gets
    the lowest pid an earlier worker had. Nothing anywhere else (a pod of any other job; a worker,
    which starts no agent)."""
    if os.environ.get(REUSE_PIDS_VARIABLE) != "1":
        return
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    start_workers = LocalElasticAgent._start_workers
    earlier: list[int] = []

    def start_reusing_pids(agent: Any, worker_group: Any) -> dict[int, int]:
        if earlier:
            NS_LAST_PID.write_text(str(min(earlier) - 1))
        pids: dict[int, int] = start_workers(agent, worker_group)
        if earlier:
            reused = sorted(set(pids.values()) & set(earlier))
            print(f"{PID_REUSE_LINE}: pids {sorted(pids.values())}, earlier {sorted(earlier)}, reused {reused}",
                  file=sys.stderr, flush=True)
        earlier.extend(pids.values())
        return pids

    LocalElasticAgent._start_workers = start_reusing_pids  # type: ignore[method-assign]
