"""What an action's ``error.pb`` names: the pod and the global rank, read back from its message.

flyteidl2's ``ContainerError`` has no worker and no timestamp, so the message is all a person (and
this check) has. This plugin's agreed report starts with a marked line (``[root cause] rank 3 (local
rank 1, group rank 1) on worker train-worker-1 ...``, or ``[lost pod] ... on worker ...``);
upstream ``Elastic``'s error lists its own pod's failed ranks (``PyTorch worker(s) failed:`` then
``rank 3: exitcode=...``) and names no pod, so its pod is the one the rendezvous gave that rank.
"""

from __future__ import annotations

import re

from rootcause_core.roles import rank_from_report

#: (pod, global rank) an error names; ``None`` for what it does not say.
Verdict = tuple[str | None, int | None]

_MARKED_WORKER_RE = re.compile(r"^\[(?:root cause|victim|lost pod)\] .*? on worker (\S+) ", re.MULTILINE)
_UPSTREAM_RANK_RE = re.compile(r"^PyTorch worker\(s\) failed:\s*\n\s*rank (\d+): ", re.MULTILINE)


def rootcause_verdict(message: str) -> Verdict:
    """The pod and rank this plugin's agreed report names on its first marked line."""
    match = _MARKED_WORKER_RE.search(message)
    return (match.group(1) if match else None), rank_from_report(message)


def upstream_verdict(message: str, placement: dict[int, tuple[str, int]]) -> Verdict:
    """The first rank upstream ``Elastic``'s error lists, and the pod the rendezvous gave it."""
    match = _UPSTREAM_RANK_RE.search(message)
    if match is None:
        return None, None
    rank = int(match.group(1))
    where = placement.get(rank)
    return (where[0] if where else None), rank
