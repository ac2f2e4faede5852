"""Worker side: the blocking point-to-point calls (send, recv) this rank has open, and with whom.
Under gloo, torch's Flight Recorder numbers collectives only. A rank that hangs while its neighbour
waits in a recv for it leaves no trace there. The neighbour times out as in a collective, and its
last collective is one the hung rank entered too. Knowing the peer each open call waits for lets the
diagnosis name the hung rank. The table takes no lock, since the hang probe's signal handler reads
it (:mod:`.hang_probe`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from rootcause_core.collectives import CollectivePosition
from rootcause_engine.upstream.torch_worker import observe_point_to_point


class PointToPointLedger:
    """The open point-to-point calls of one process, as collective positions naming their peer."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._open: dict[int, CollectivePosition] = {}

    def entered(self, operation: str, peer: int | None, group: str) -> Callable[[], None]:
        """Note a call that starts now; returns what to call when it returns."""
        number = next(self._numbers)
        position = CollectivePosition(
            pg=group, seq=number, op=operation, entered_ns=time.time_ns(), awaited=(peer,) if peer is not None else ()
        )
        self._open[number] = position
        return lambda: self._returned(number)

    def _returned(self, number: int) -> None:
        self._open.pop(number, None)

    def open_calls(self) -> list[CollectivePosition]:
        """The calls still open, oldest first (from a copy: the table may change while they are sorted)."""
        return sorted(self._open.copy().values(), key=lambda position: position.seq)


#: The ledger of this process, once :func:`record_point_to_point` ran.
_ledger: list[PointToPointLedger] = []


def record_point_to_point() -> bool:
    """Start keeping this process's ledger (idempotent); False where torch's calls cannot be observed."""
    if _ledger:
        return True
    ledger = PointToPointLedger()
    try:
        observe_point_to_point(ledger.entered)
    except Exception:
        return False
    _ledger.append(ledger)
    return True


def open_point_to_point_calls() -> list[CollectivePosition]:
    """This process's open point-to-point calls (none before :func:`record_point_to_point`)."""
    return _ledger[0].open_calls() if _ledger else []
