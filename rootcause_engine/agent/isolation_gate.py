"""Agent side: the isolation gate, the one place a pod decides whether it may declare peers lost.

Why: a pod that is itself cut off sees its peers fall silent, exactly as a healthy pod sees a lost
one. Naming them would end a healthy job with the wrong pod named. So every ``lost`` this agent
appends goes through :meth:`IsolationGate.judge` first. Only the larger side of a split may name
anyone. Where the split is even, a third party decides: what each pod reached of the cluster, posted
on the object store (:class:`ContactBoard`). How: ``docs/frozen_pods.md``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from rootcause_core.bounded_json import loads_bounded
from rootcause_core.liveness import Reach, Settled, Side, isolation_side, settle_even_split
from rootcause_core.store_paths import join
from rootcause_engine.agent.peer_link import PROBE_TIMEOUT_S, LinkEndpoint, probe
from rootcause_engine.thread_guard import run_soon

logger = logging.getLogger(__name__)

#: Where, under the task's output prefix, pods that lost each other post what they reached.
CONTACT_FOLDER = "rootcause-contact"
#: Bytes of one posted contact at most (a few fields; anything larger is not one).
MAX_CONTACT_BYTES = 4096
#: How long the failure path waits for an even split's settling beyond the wait for the accused's
#: contact (this pod's API probe and its own post); past it, this pod declares no one lost.
SETTLE_MARGIN_S = 10.0
#: Seconds one try of the cluster's API endpoint gets.
API_TIMEOUT_S = 1.5
#: Seconds between two looks for the accused's contact.
LOOK_INTERVAL_S = 0.5
#: Seconds the probes of :func:`probe_all` are waited for at most: one probe's limit, and a margin.
PROBES_WAIT_S = PROBE_TIMEOUT_S + 1.0


class ContactBoard(Protocol):
    """The object store as a third party: a small file per pod, under the task's output prefix."""

    def post(self, name: str, data: bytes) -> None:
        """Write ``data`` as ``name``; raises when the store cannot be reached."""

    def read(self, name: str) -> bytes | None:
        """The bytes of ``name``; ``None`` while there is none; raises when the store cannot be reached."""


@dataclasses.dataclass(frozen=True)
class FsspecBoard:
    """A :class:`ContactBoard` on an fsspec filesystem (the one the front-end's uploads use)."""

    fs: Any
    prefix: str

    def _path(self, name: str) -> str:
        return join(self.prefix, CONTACT_FOLDER, name)

    def post(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if "://" not in path or path.startswith("file://"):  # a local folder: fsspec makes no parents there
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)

    def read(self, name: str) -> bytes | None:
        path = self._path(name)
        self.fs.invalidate_cache(path.rsplit("/", 1)[0])  # a cached listing would say "absent" for ever
        try:
            if self.fs.size(path) > MAX_CONTACT_BYTES:
                return None
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            return None


def api_endpoint(environ: Mapping[str, str] = os.environ) -> tuple[str, int] | None:
    """The cluster's API endpoint as every pod's environment gives it; ``None`` outside a cluster."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def reaches(address: tuple[str, int], timeout_s: float = API_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``address`` is made within ``timeout_s`` (nothing is sent)."""
    try:
        with socket.create_connection(address, timeout=timeout_s):
            return True
    except (OSError, ValueError):  # ValueError: a host no socket takes
        return False


def probe_all(endpoints: Sequence[LinkEndpoint]) -> int:
    """How many of ``endpoints`` greet a fresh connection, probed at once on the callback pool.

    The heartbeat waits for this: each probe gives up within :data:`PROBE_TIMEOUT_S`, and one that a
    busy pool has not run by :data:`PROBES_WAIT_S` counts as not reached (it is called off), so the
    heartbeat never waits longer."""
    probes = [run_soon(functools.partial(probe, endpoint), name="isolation probe") for endpoint in endpoints]
    concurrent.futures.wait(probes, timeout=PROBES_WAIT_S)
    for late in probes:
        late.cancel()  # not started yet: it never will be
    return sum(1 for done in probes if done.done() and not done.cancelled() and done.exception() is None
               and done.result())


@dataclasses.dataclass(frozen=True)
class Suspect:
    """An accused peer: its pod name and the name its contact is posted under (``None``: unknown)."""

    worker: str
    contact: str | None


@dataclasses.dataclass(frozen=True)
class GateAnswer:
    """The gate's answer on one accusation."""

    lost: frozenset[int] = frozenset()  #: accused that may be declared lost
    links: frozenset[int] = frozenset()  #: accused of which only the link with this pod was lost
    cut_off: str | None = None  #: why this pod names no one (it is the one cut off)
    pending: bool = False  #: a third party's word is awaited: ask again at the next look


def encode_contact(worker: str, reach: Reach) -> bytes:
    return json.dumps({"pod": worker, "api": reach.api, "object_store": reach.object_store}).encode()


def decode_contact(data: bytes | None) -> Reach | None:
    """What a posted contact says was reached; ``None`` for no contact or one that is not valid."""
    if data is None or len(data) > MAX_CONTACT_BYTES:
        return None
    try:
        fields = loads_bounded(data.decode("utf-8"), max_bytes=MAX_CONTACT_BYTES)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(fields, dict):
        return None
    api, store = fields.get("api"), fields.get("object_store")
    if not all(value is None or isinstance(value, bool) for value in (api, store)):
        return None
    return Reach(api=api, object_store=store)


class IsolationGate:
    """One rendezvous round's gate, for one pod (see the module docstring).

    ``contact``: the name this pod posts under (fresh for each round, published in its ``join``);
    ``board``: the object store (``None``: none known, an even split is then named on this pod's
    own reach alone); ``wait_s``: how long the accused's contact is awaited.
    """

    def __init__(self, worker: str, *, contact: str, board: ContactBoard | None, wait_s: float,
                 api: tuple[str, int] | None = None,
                 probe: Callable[[Sequence[LinkEndpoint]], int] = probe_all) -> None:
        self.worker = worker
        self.contact = contact
        self.board = board
        self.wait_s = wait_s
        self.api = api
        self._probe = probe
        #: each even split's settling, by its accused: one per split, whichever thread asks first
        #: (``dict.setdefault`` is atomic: two threads asking at once share one settling, without a lock)
        self._settling: dict[frozenset[int], concurrent.futures.Future[GateAnswer]] = {}

    def judge(self, accused: Mapping[int, Suspect], witnesses: Sequence[LinkEndpoint], *,
              block: bool = False) -> GateAnswer:
        """Whether this pod may declare ``accused`` lost, having probed ``witnesses`` (other peers, not
        accused). An even split is settled on the callback pool: until then the answer is
        ``pending``, unless ``block`` (the failure path, which waits for its answer)."""
        if not accused:
            return GateAnswer()
        reached = self._probe(witnesses)
        side = isolation_side(accused=len(accused), witnesses=len(witnesses), reached=reached)
        if side is Side.LARGER:
            return GateAnswer(lost=frozenset(accused))
        names = ", ".join(suspect.worker for _, suspect in sorted(accused.items()))
        if side is Side.SMALLER:
            return GateAnswer(cut_off=f"{names} fell silent and this pod reached {reached} of the {len(witnesses)} "
                                      "other peers it probed directly: this pod is the one cut off from the network, "
                                      "so it declares no one lost")
        fresh: concurrent.futures.Future[GateAnswer] = concurrent.futures.Future()
        settling = self._settling.setdefault(frozenset(accused), fresh)
        if settling is fresh:
            run_soon(functools.partial(self._settle, dict(accused), settling), name="isolation gate")
        if block:
            try:
                return settling.result(timeout=self.wait_s + SETTLE_MARGIN_S)
            except concurrent.futures.TimeoutError:  # a store or API that hangs must not hang the failure path
                return GateAnswer(cut_off=f"{names} fell silent, and settling who is cut off took over "
                                          f"{self.wait_s + SETTLE_MARGIN_S:.0f} s (the object store or the API did "
                                          "not answer): this pod declares no one lost")
        return settling.result() if settling.done() else GateAnswer(pending=True)

    def _settle(self, accused: dict[int, Suspect], answer: concurrent.futures.Future[GateAnswer]) -> None:
        try:
            answer.set_result(self._settled(accused))
        except Exception as error:  # never a silent gate: an error names no one, and says so
            logger.exception("isolation gate: settling an even split failed")
            answer.set_result(GateAnswer(cut_off=f"settling an even split failed ({type(error).__name__}): "
                                                 "this pod declares no one lost"))

    def _settled(self, accused: dict[int, Suspect]) -> GateAnswer:
        api = None if self.api is None else reaches(self.api)
        own = Reach(api=api, object_store=self._post(api))
        heard = self._hear(accused) if own.object_store else {}
        settled = {rank: settle_even_split(own, heard.get(rank)) for rank in accused}
        names = ", ".join(suspect.worker for _, suspect in sorted(accused.items()))
        logger.warning("isolation gate: lost contact with %s, and no other peer to ask; this pod reached %s; what "
                       "the accused said: %s; outcome: %s", names, _reached_text(own),
                       {accused[rank].worker: _reached_text(reach) for rank, reach in heard.items()} or "nothing",
                       {accused[rank].worker: outcome.value for rank, outcome in settled.items()})
        if any(outcome is Settled.CUT_OFF for outcome in settled.values()):
            return GateAnswer(cut_off=f"{names} fell silent, and this pod reached {_reached_text(own)}, less than "
                                      "its peer: this pod is the one cut off from the network, so it declares no "
                                      "one lost")
        return GateAnswer(lost=frozenset(rank for rank, outcome in settled.items() if outcome is Settled.ACCUSE),
                          links=frozenset(rank for rank, outcome in settled.items() if outcome is Settled.LINK))

    def _post(self, api: bool | None) -> bool | None:
        """Post what this pod reached; whether the object store took it (``None``: no store known)."""
        if self.board is None:
            return None
        try:
            self.board.post(f"{self.contact}.json", encode_contact(self.worker, Reach(api=api, object_store=True)))
        except Exception as error:  # any store fault: this pod did not reach the object store
            logger.warning("isolation gate: the object store did not take this pod's contact: %s", error)
            return False
        return True

    def _hear(self, accused: dict[int, Suspect]) -> dict[int, Reach]:
        """What each accused posted within ``wait_s`` (absent: it posted nothing readable)."""
        heard: dict[int, Reach] = {}
        deadline = time.monotonic() + self.wait_s
        while True:
            for rank, suspect in accused.items():
                if rank not in heard and suspect.contact is not None:
                    reach = self._read(suspect.contact)
                    if reach is not None:
                        heard[rank] = reach
            if len(heard) == len(accused) or time.monotonic() >= deadline:
                return heard
            time.sleep(LOOK_INTERVAL_S)

    def _read(self, contact: str) -> Reach | None:
        assert self.board is not None
        try:
            return decode_contact(self.board.read(f"{contact}.json"))
        except Exception as error:  # a store fault: not heard this time
            logger.debug("isolation gate: reading a peer's contact failed: %s", error)
            return None


def _reached_text(reach: Reach) -> str:
    parts = [f"the cluster's API endpoint: {'yes' if reach.api else 'no'}" if reach.api is not None else "",
             f"the object store: {'yes' if reach.object_store else 'no'}" if reach.object_store is not None else ""]
    return "; ".join(part for part in parts if part) or "no third party (none known)"


def may_name_missing(*, missing: int, arrived: int, api: tuple[str, int] | None) -> str | None:
    """The gate for the nodes that never arrived at a soft restart's world: ``None`` when this node
    may log them ``lost``, else why not.

    The nodes that arrived wrote in the same store: they are the witnesses this node reached. Only
    the larger side names anyone. An even split (two nodes) is named only where this node reaches
    the cluster's API endpoint (no contact is exchanged there: the world's store is the one thing
    both would have to reach); a store host cut off from everyone else sees every node miss.
    """
    side = isolation_side(accused=missing, witnesses=arrived, reached=arrived)
    if side is Side.LARGER or (side is Side.EVEN and (api is None or reaches(api))):
        return None
    return (f"{missing} node(s) never arrived and only {arrived} other(s) did: this node may be the one cut off "
            "from the network, so it declares no one lost")
