"""A Flyte 2 PyTorchJob on one machine: N pods, each the real ``a0`` entrypoint, one rendezvous.

Used by ``rootcause-demo-flyte2``, the Flyte 2 end-to-end tests and ``benchmarks/e2e_flyte2.py``.
Each "pod" is a process started as the training operator starts the task's container (the task's
serialized container args with propeller's templates filled in, ``PET_*`` variables, one run and
action name, the pod name in ``FLYTE_INTERNAL_WORKER_NAME``), all writing to one output prefix, as
the pods of one action do; the action's ``error.pb`` is then whatever the last writer left.
"""
