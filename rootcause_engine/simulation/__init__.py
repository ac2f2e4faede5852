"""What the simulated jobs of both flavours share, Flyte-free: the faults injected into a worker,
the training loop the workers run, loopback helpers (free ports, bounded DNS waits) and the
skewed-clock ``sitecustomize``. Each flavour's simulator (``flytekitplugins_rootcause.simulation``,
``flyteplugins.rootcause.simulation``) starts the pods its own way.
"""
