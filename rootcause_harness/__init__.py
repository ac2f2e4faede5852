"""What the simulated jobs of both flavours share, Flyte-free: the faults injected into a worker (or
its agent), the training loop the workers run, loopback helpers (free ports, bounded DNS waits) and the
skewed-clock ``sitecustomize``. Each flavour's simulator (``rootcause_harness.flytekit``,
``rootcause_harness.flyte2``) starts the pods its own way.
"""
