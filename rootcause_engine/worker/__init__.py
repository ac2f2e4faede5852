"""Code that runs inside each training worker process (the user's function's process).

- :mod:`.recorder`: records the worker's uncaught exception in torch's error-file format, with
  nanosecond time, ranks and host (the culprit's own testimony);
- :mod:`.process_settings`: per-worker process settings applied before the user's function.

May import: the shared core (``rootcause_core``), torch, and for torch's internals
:mod:`rootcause_engine.upstream.torch_worker` only. Never the agent, diagnosis or entrypoint
packages: a worker must stay cheap to start and must not carry agent state across ``fork``.
"""
