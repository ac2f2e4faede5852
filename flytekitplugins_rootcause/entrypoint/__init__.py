"""``pyflyte-rootcause-execute``: the pod's entrypoint (a drop-in for flytekit's ``pyflyte-execute``).

It runs in the pod's main process, which also hosts the agent. On a failure it writes one error
document per worker (``error-<worker>-<uuid>.<listing key>.pb``) and creates ``error.pb`` only if
absent:

- :mod:`.command`: the click command (flytekit's callback, with its error-file hooks swapped);
- :mod:`.error_documents`: what goes in the document, its name, and whether to write ours at all
  (one plan per exception, made from the exception);
- :mod:`.error_upload`: the writes themselves (each file on its own, create-if-absent, retried under one
  deadline by :mod:`rootcause_core.store_retry`) and which failed write fails the pod.

May import: the shared core (which holds the listing key's rule, so a name's key is what the reader
will parse without this package importing ``backend_reader``), flytekit,
:mod:`rootcause_engine.agent.failure_sink`,
:mod:`flytekitplugins_rootcause.upstream.flytekit_entrypoint` (every hook into flytekit's internals).
Not torch: plain tasks run through this command without importing it.

The console script is :func:`.main.main`: it notes the kubelet's SIGTERM before it imports
anything heavy (:mod:`rootcause_core.pod_stop`). This package imports nothing on its own for that
reason: its public names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PATCHED_ENTRYPOINT": "flytekitplugins_rootcause.upstream.flytekit_entrypoint",
    "WRITE_FAILED_EXIT_CODE": "flytekitplugins_rootcause.entrypoint.command",
    "execute_task_cmd": "flytekitplugins_rootcause.entrypoint.command",
}

__all__ = ["PATCHED_ENTRYPOINT", "WRITE_FAILED_EXIT_CODE", "execute_task_cmd"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
