"""A faithful PyTorchJob on one machine: N pods, each the patched entrypoint, one rendezvous.

Used by ``rootcause-demo``, the end-to-end tests and ``benchmarks/e2e.py``. Kubernetes cannot run
here, so each "pod" is a process started exactly as the training operator starts the task's
container (the serialized container args, ``PET_*`` variables, one execution id, the pod name in
``FLYTE_INTERNAL_WORKER_NAME``), all sharing one output prefix. Then ``backend_reader`` decides.
"""
