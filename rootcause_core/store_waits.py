"""Read a store-wait timeout: which ranks a worker waited for when its process group failed to form.

A rank that never reaches ``init_process_group`` raises nothing. Its peers reach it, wait for that
rank's key in the rendezvous store, and time out with victims' errors. But the key they waited for
names the rank that never came. So reading the key in a peer's timeout finds the hung rank. Only the
default group's gloo keys are read, since only they name a global rank. The module is pure: the
agent's hung-rank verdict and the reader share it. ``docs/messages.md`` shows the key's shape.
"""

from __future__ import annotations

import dataclasses
import re

#: One store key as torch writes it: printable ASCII, no space or comma (hostile bytes end it).
_KEY = r"[!-+\--~]{1,512}"
#: torch's ``TCPStore`` message for a ``wait`` (or ``get``) that ran out of time: "keys: a, b".
#: Numbers are ASCII digits (``re.ASCII``: ``\d`` alone takes any script's digits, which ``int`` reads).
_WAIT_TIMEOUT_RE = re.compile(rf"wait timeout after (\d{{1,12}})ms, keys: ({_KEY}(?:, {_KEY}){{0,255}})", re.ASCII)
#: The tail of a gloo full-mesh key: ``<group>//<device>//<context>/<rank>``.
_GLOO_KEY_RE = re.compile(r"(?:^|/)([^/]{1,64})//([a-z]{1,16})//(\d{1,6})/(\d{1,9})$", re.ASCII)
#: The name torch gives the default process group (its first group; counted again from 0 after
#: ``destroy_process_group()``).
DEFAULT_GROUP = "0"
#: Ranks read from one message at most (a message is hostile input until parsed).
_MAX_RANKS = 64


@dataclasses.dataclass(frozen=True)
class StoreWait:
    """A store wait that timed out while the default process group formed."""

    waited_ms: int
    awaited: tuple[int, ...]  # global ranks whose keys never came, in the order the message names them


def read_store_wait(message: str) -> StoreWait | None:
    """The ranks of the default group a failed worker waited for, or ``None`` when ``message`` is no
    such timeout (any other store error, another group's keys, a user's own keys)."""
    match = _WAIT_TIMEOUT_RE.search(message)
    if match is None:
        return None
    awaited: list[int] = []
    for key in match.group(2).split(", "):
        key_match = _GLOO_KEY_RE.search(key)
        if key_match is None or key_match.group(1) != DEFAULT_GROUP:
            continue
        rank = int(key_match.group(4))
        if rank not in awaited:
            awaited.append(rank)
        if len(awaited) >= _MAX_RANKS:
            break
    return StoreWait(int(match.group(1)), tuple(awaited)) if awaited else None


def awaits_peers(message: str) -> bool:
    """True when ``message`` is a process group's store wait for peers that never came: a victim's."""
    return read_store_wait(message) is not None
