"""``pyflyte-rootcause-execute``: the pod's entrypoint (a drop-in for flytekit's ``pyflyte-execute``).

flytekit writes one ``error.pb`` per pod, and the last pod's replaces the first's. So the root cause
is often lost. This entrypoint writes one error document per worker instead, and creates ``error.pb``
only if absent. :mod:`.command` is the click command, :mod:`.error_documents` decides what to write,
and :mod:`.error_upload` writes it. It runs in the pod's main process, beside the agent. It never
imports torch, since plain tasks run through it too. Its console script notes the kubelet's SIGTERM
before any heavy import, so this package resolves its names lazily. ``docs/entrypoint.md`` has the
rest.
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
