"""Write a worker's file so that readers only ever see it complete.

Both worker files the agent acts on go through here: the error file (the agent may tear the worker
down the moment it exists) and the hang probe's answer (the agent takes the first it can parse).
Kept free of heavy imports: the probe's answer is written from a signal handler.
"""

from __future__ import annotations

import os
import warnings


def write_complete(path: str, text: str) -> None:
    """Write ``text`` so that ``path`` appears only complete (a temporary sibling, then a rename).

    The agent takes an error file that exists as the worker's committed failure and may tear the
    worker down at once (:mod:`rootcause_engine.agent.launch_observer`); a half-written file
    would lose the message. Like
    torch's own writer, a failure to write only warns: the worker is failing already.
    """
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        warnings.warn(f"Unable to write {path}: {exc}", stacklevel=2)
