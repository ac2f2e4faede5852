"""The ``rootcause-a0`` console script: the kubelet's SIGTERM is noted first, then flyte's ``a0`` runs.

A pod can be stopped while ``a0`` still imports flyte and torch or loads the task. Python's default
would end it at once with exit code 143. That fails the PyTorchJob with nothing for Flyte 2 to read.
Noted instead, the stop becomes the launch's recorded, recoverable root cause, and the pod exits 0
with its ``error.pb``. So nothing but :mod:`rootcause_core.pod_stop` is imported before the notice is
installed. ``docs/flyte2.md`` has the details.
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
