"""The shared core: the vocabulary the worker, the agent, the entrypoint and the reader all speak.

Pure Python (stdlib and protobuf only: no flytekit, no torch, no I/O), its own distribution
(``rootcause-core``), which the reader, the engine and both front-ends require: a backend service
gets it without the plugin, and a Flyte 2 install without any Flyte 1 package. Each item has
exactly one home here:

- :mod:`rootcause_core.timestamps`: nanoseconds per second, RFC 3339 with nanoseconds, protobuf
  ``Timestamp`` conversions;
- :mod:`rootcause_core.worker_names`: where a worker (pod) name comes from and how it is sanitized;
- :mod:`rootcause_core.roles`: victim or candidate, from a failure's message, signal or exit code;
  the teardown signals;
- :mod:`rootcause_core.ordering`: the root-cause rule (candidates first, then time, rank, worker);
- :mod:`rootcause_core.error_files`: error file names and the listing key in them;
- :mod:`rootcause_core.safe_text`: bounded, printable text from hostile messages;
- :mod:`rootcause_core.timeline`: failures as offsets from the root cause.
- :mod:`rootcause_core.testimony`: what a pod says about its failure beyond ``ContainerError``'s
  fields (its true time when a victim's stamp is moved for Flyte's earliest-timestamp rule).
- :mod:`rootcause_core.collectives`: where a rank stood in its collectives, and whether it entered
  the one its peers timed out in (the hung-rank rule);
- :mod:`rootcause_core.store_waits`: the ranks a peer's store-wait timeout names when the default
  process group never formed.
"""
