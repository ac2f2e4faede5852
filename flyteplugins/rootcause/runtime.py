"""The ``rootcause-a0`` console script: the kubelet's SIGTERM is noted first, then flyte's ``a0`` runs.

Why first: a pod can be stopped (preemption, drain, eviction) while ``a0`` still imports flyte and
torch, or downloads the code bundle and loads the task. Python's default would end it at once with
exit code 143, which fails the PyTorchJob with nothing for Flyte 2 to read. Noted instead, the stop
becomes the launch's recorded, recoverable root cause as soon as the task starts it
(:mod:`rootcause_engine.agent.termination`), and the pod exits 0 with its ``error.pb``.

The task's container args name this script instead of ``a0``
(``RootCauseTorchFunctionTask.container_args``); everything after the script's name is ``a0``'s.
Nothing but :mod:`rootcause_core.pod_stop` is imported before the notice is installed (this package
resolves its public names lazily for that reason). Where flyte lacks an internal this flavour uses,
the notice is given back and ``a0`` runs as it is (the task then runs upstream's launch).
"""

from __future__ import annotations

from rootcause_core.pod_stop import POD_STOP


def main() -> None:
    POD_STOP.install()
    from flyteplugins.rootcause.upstream import flyte_readiness, run_flyte_runtime

    readiness = flyte_readiness(restart_policy=None)
    readiness.announce()
    if not readiness.diagnosis_on:
        POD_STOP.release()  # flyte's a0 as it is: the task runs as upstream's too
    run_flyte_runtime(readiness.diagnosis_on)


if __name__ == "__main__":
    main()
