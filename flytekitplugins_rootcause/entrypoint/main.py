"""The ``pyflyte-rootcause-execute`` console script: the kubelet's SIGTERM is noted first, then the command runs.

Why first: a pod can be stopped (preemption, drain, eviction) while it still imports flytekit and
torch, downloads its inputs or loads the task. Python's default would end it at once with a
non-zero status, which fails the PyTorchJob with nothing for Flyte to read; noted instead, the
stop becomes the launch's recorded, recoverable root cause as soon as the task starts it
(:mod:`rootcause_engine.agent.termination`), or, for a task that does not report root causes,
Python's default once the task is known (:meth:`rootcause_core.pod_stop.PodStopNotice.release`).

Where flytekit lacks an internal the command swaps, the script runs flytekit's own
``pyflyte-execute`` instead, and says so in the log: the task still runs (its own check then runs it
as upstream ``Elastic``).
"""

from __future__ import annotations

from rootcause_core.pod_stop import POD_STOP


def main() -> None:
    POD_STOP.install()
    from flytekitplugins_rootcause.upstream import entrypoint_readiness

    readiness = entrypoint_readiness()
    readiness.announce()
    if not readiness.diagnosis_on:
        # a flytekit internal the command swaps is missing: flytekit's own pyflyte-execute, as is
        POD_STOP.release()
        from flytekit.bin.entrypoint import execute_task_cmd as flytekit_execute

        flytekit_execute()
        return
    from flytekitplugins_rootcause.entrypoint.command import execute_task_cmd

    execute_task_cmd()


if __name__ == "__main__":
    main()
