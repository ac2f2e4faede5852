"""Soft restarts: how the pods agree on the next world without torch's rendezvous.

Why not torch's ``DynamicRendezvousHandler`` for every change: its join loop polls the store once a
second (``_delay(seconds=1)`` on every ``SYNC``), its last-call wait is a whole number of seconds
(``last_call_timeout`` is read with ``get_as_int`` and must be > 0), and a member can only leave a
complete round by joining the next one. Survivors would pay 1-2 s per change. The first world *is*
torch's rendezvous (group ranks, store, master address); every later one is agreed here, in that
round's store (the c10d rendezvous store, alive as long as the job), with a few keys:

- ``log/len`` and ``log/<i>``: an append-only log of membership events (``leave``: a node failed
  and restarts its workers; ``join``: its workers are ready again; ``fatal``: a failure that ends
  the job; ``lost``: a member that never arrived, or that the peer watch found lost: a pod that
  vanished or froze), the job's :class:`~.event_log.EventLog` (a round's ledger is the same class
  under the round's prefix). Appending is one atomic ``add`` for the index and one
  ``compare_set`` for the entry: an index whose writer died before writing it is voided after a
  short grace by the first reader that waited for it, so every node reads the same log.
- ``world/<v>``: world ``v`` covers the log up to the length written there. The first proposer wins
  (``compare_set``); its members are the first world's nodes with the log applied, in node order.
- ``arrive/<v>/<node>``: a member is ready for world ``v``; ``decided/<v>``: ``formed`` once every
  member arrived, or ``abandoned`` (a newer world was proposed, or a member never came). The first
  decision wins (``compare_set``), so all pods agree whether ``v`` was formed.
- ``finished``: a node's workers all returned: the training is over, so a node still restarting
  (whose workers are not in the current world) stops waiting for a world and ends too.
- ``exit/<node>``: the node reached the end of the job; once the world is no longer the first one
  (a node lost, or one added), the nodes wait for each other here instead of in torch's exit
  barrier (which waits for every node of the first world).
- ``job``: the job is running (the first world's node count), written by every node of the first
  world; ``added``: how many pods joined the running job later.

A node's index is its group rank in the first world; a node keeps it across restarts, so a node that
comes back gets its old ranks back. A pod that arrives once the job runs (Kubernetes rescheduled a
lost one, or the job started with fewer than ``nnodes``' maximum) does not go through torch's
rendezvous, whose round is closed: it takes the next free index (:meth:`SoftWorld.join_running`)
and joins like a restarted node. These keys live in the rendezvous store under the job's run id,
not under the first round's prefix, so such a pod finds them.

Every store call goes through a :class:`~.bounded_store.BoundedStore` (``store_timeout_s``: a store
whose host froze raises ``StoreUnresponsive``, a ``TimeoutError``, instead of blocking the loop for
ever), and every value read is checked by :mod:`.store_values`. Each node reads the same bytes, so a
value that is not valid is skipped alike by all: an entry that is not a change, a proposal that is no
length (its world is abandoned), a decision that is neither ``formed`` nor ``abandoned`` (not
formed). A log longer than :data:`MAX_LOG_ENTRIES` cannot be agreed on: :class:`WorldUnreadable`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from rootcause_core.liveness import SILENCE_LIMIT_S
from rootcause_engine.agent.bounded_store import BoundedStore
from rootcause_engine.agent.event_log import Event, EventLog
from rootcause_engine.agent.isolation_gate import api_endpoint, may_name_missing
from rootcause_engine.agent.store_values import (
    MAX_COUNT,
    as_dict,
    as_int,
    bad_value,
    bump_counter,
    int_value,
    json_value,
    read_value,
    text_value,
)
from rootcause_engine.store_layout import (
    SOFT_ADDED_KEY,
    SOFT_FINISHED_KEY,
    SOFT_JOB_KEY,
    SOFT_LOG_LENGTH_KEY,
    soft_arrive_key,
    soft_decided_key,
    soft_exit_key,
    soft_log_key,
    soft_lost_key,
    soft_world_key,
)

logger = logging.getLogger(__name__)

FORMED, ABANDONED = "formed", "abandoned"

#: How often a node waiting for the other members of a world looks at the store.
POLL_INTERVAL_S = 0.01
#: The deadline of each store call (a frozen store host): the peer watch's silence limit by default.
STORE_TIMEOUT_S = SILENCE_LIMIT_S
#: The most membership changes a job's log may hold. A node restarts once (its second failure ends
#: the job), so a job logs a few changes per node; a longer log is not one of ours, and reading it
#: would cost every node that many store reads.
MAX_LOG_ENTRIES = 4096
#: The membership log's kinds of event: a node ``leave``s (it restarts its workers), ``join``s (its
#: workers are ready again), fails for good (``fatal``) or is ``lost``.
JOB_KINDS = ("leave", "join", "fatal", "lost")


class WorldUnreadable(TimeoutError):
    """The job's world state in the store cannot be agreed on (a membership log longer than
    :data:`MAX_LOG_ENTRIES`, a counter that holds no count): no world change can complete. A
    ``TimeoutError`` because the soft-restart loop must answer it as it answers a world change that
    did not complete in time: it fails the job, with a report, instead of crashing."""


@dataclasses.dataclass(frozen=True)
class World:
    """A world the pods agreed on: its version, its nodes in rank order, and the fatal change, if any."""

    version: int
    members: tuple[int, ...]
    fatal: Event | None = None
    changes: tuple[Event, ...] = ()
    finished: bool = False  # the training ended before this world formed
    #: its proposal is no log length (every node reads the same bytes): no node forms it
    void: bool = False

    def group_rank(self, node: int) -> int:
        return self.members.index(node)

    @property
    def grew(self) -> bool:
        """Whether the change that made this world was a node (re)joining (else one leaving)."""
        return bool(self.changes) and self.changes[-1].kind == "join"


def members_after(initial: Sequence[int], changes: Sequence[Event]) -> tuple[tuple[int, ...], Event | None]:
    """The nodes of a world whose log is ``changes`` (in node order), and the first fatal change."""
    nodes = set(initial)
    fatal = None
    for change in changes:
        if change.kind in ("leave", "lost", "fatal"):
            nodes.discard(change.rank)
        elif change.kind == "join":
            nodes.add(change.rank)
        if change.kind == "fatal" and fatal is None:
            fatal = change
    return tuple(sorted(nodes)), fatal


class SoftWorld:
    """This node's view of the agreed worlds (see the module docstring).

    ``store`` is torch's store (a world's process group and peer watch meet under its prefixes); this
    class calls it only through its bounded client (``store_timeout_s`` per call)."""

    def __init__(self, store: Any, node: int, name: str, initial: Sequence[int], min_nodes: int = 1, *,
                 store_timeout_s: float = STORE_TIMEOUT_S, client: BoundedStore | None = None) -> None:
        self.store = store
        self.node = node
        self.name = name
        self.initial = tuple(initial)
        self.min_nodes = min_nodes
        self.current = World(0, tuple(sorted(initial)))
        self._client = client if client is not None else _client(store, store_timeout_s)
        self._lock = threading.Lock()  # one call at a time: the bounded client serves one
        self._log = EventLog(SOFT_LOG_LENGTH_KEY, soft_log_key, kinds=JOB_KINDS, max_rank=MAX_COUNT,
                             max_entries=MAX_LOG_ENTRIES)

    def _call(self, operation: str, *args: Any) -> Any:
        with self._lock:
            return self._client.call(operation, *args)

    def close(self) -> None:
        """Release the bounded client's helper thread (the loop is over)."""
        self._client.close()

    # --- a job running, and pods that join it later ------------------------------------------

    def announce_running(self) -> None:
        """The first world formed: a pod that arrives from now on joins it (:meth:`join_running`)."""
        self._call("set", SOFT_JOB_KEY, json.dumps({"nodes": len(self.initial)}))

    @staticmethod
    def running_job_nodes(store: Any, store_timeout_s: float = STORE_TIMEOUT_S) -> int | None:
        """The first world's node count of the job running in ``store``; ``None`` if none runs yet."""
        client = _client(store, store_timeout_s)
        try:
            return _job_nodes(client.call)
        finally:
            client.close()

    @classmethod
    def join_running(cls, store: Any, name: str, min_nodes: int = 1, *,
                     store_timeout_s: float = STORE_TIMEOUT_S) -> SoftWorld | None:
        """A pod arriving once the job runs: a fresh node index after every earlier one, and the
        latest formed world as the current one (its :meth:`join` then asks for the next). ``None``
        (and nothing written) when no job runs yet: the pod takes part in torch's rendezvous."""
        client = _client(store, store_timeout_s)
        initial = _job_nodes(client.call)
        if initial is None:
            client.close()
            return None
        added = bump_counter(client.call, SOFT_ADDED_KEY)
        if added is None:
            client.close()
            raise WorldUnreadable(f"the count of pods that joined the running job ({SOFT_ADDED_KEY}) is no count")
        world = cls(store, initial - 1 + added, name, range(initial), min_nodes, client=client)
        world.current = world.latest_formed()
        return world

    def latest_formed(self) -> World:
        """The newest world the pods formed (the first one if none formed since)."""
        latest = self.current
        for version in range(1, MAX_LOG_ENTRIES + 2):  # each world covers one more change at least
            decision = self._decision(version)
            if decision is None:
                return latest
            if decision == FORMED and not (world := self._world(version)).void:
                latest = world
        raise WorldUnreadable(f"more than {MAX_LOG_ENTRIES + 1} worlds were decided")

    # --- log and proposals ---------------------------------------------------------------------

    def _append(self, op: str, reason: str = "", node: int | None = None, name: str | None = None) -> int:
        change = Event(op, self.node if node is None else node, name or self.name, reason, time.time_ns())
        index = self._log.append(self._call, change)
        if index is None:
            raise WorldUnreadable(f"the membership log ({SOFT_LOG_LENGTH_KEY}) cannot take another change")
        return index

    def _changes_through(self, length: int) -> list[Event]:
        """The valid changes among log entries 1 to ``length`` (a gap waited for, then voided)."""
        return list(self._log.read_through(self._call, length, poll_s=POLL_INTERVAL_S))

    def _proposed_length(self, version: int) -> int | None:
        """Propose world ``version`` as the log so far; the length of whichever proposal won
        (``None`` for one that is no length)."""
        length = self._log.length(self._call)
        if length is None:
            raise WorldUnreadable(f"the membership log's length ({SOFT_LOG_LENGTH_KEY}) is no count")
        won = self._call("compare_set", soft_world_key(version), "", str(length))
        return int_value(won, soft_world_key(version), high=MAX_LOG_ENTRIES)

    def _propose_covering(self, index: int) -> int:
        """The first world whose proposal includes log entry ``index`` (proposing it if needed)."""
        for version in range(self.current.version + 1, MAX_LOG_ENTRIES + 2):
            length = self._proposed_length(version)
            if length is not None and length >= index:
                return version
        raise WorldUnreadable(f"no world up to {MAX_LOG_ENTRIES + 1} covers membership change {index}")

    def announce_finished(self) -> None:
        """This node's workers all returned: the training is over."""
        self._call("set", SOFT_FINISHED_KEY, str(time.time_ns()))

    def job_finished(self) -> bool:
        return bool(self._call("check", [SOFT_FINISHED_KEY]))

    def change_proposed(self) -> bool:
        """Whether a world after the current one was proposed (one store round trip)."""
        return bool(self._call("check", [soft_world_key(self.current.version + 1)]))

    def leave(self, reason: str) -> None:
        """This node failed and restarts its workers: the others go on without it."""
        self._propose_covering(self._append("leave", reason))

    def remove_lost(self, node: int, name: str, reason: str) -> bool:
        """Another node is lost (the peer watch's verdict: a vanished or frozen pod): the others go on
        without it. The first node to say so logs it (one ``compare_set``); False for the others."""
        key = soft_lost_key(node)
        if text_value(self._call("compare_set", key, "", str(self.node)), key) != str(self.node):
            return False
        self._propose_covering(self._append("lost", reason, node=node, name=name))
        return True

    def first_world_barrier(self) -> bool:
        """Whether the job ends in torch's exit barrier (every node of the first world) rather than in
        :meth:`exit_barrier`: while no node was lost and none joined later, and this node is one of the
        first world's. Every node of a world decides alike (a node that restarted and never rejoined
        included), but one that joined the running job, which torch's barrier does not count."""
        current = self.current
        return (
            self.node in self.initial
            and set(current.members) <= set(self.initial)
            and not any(change.kind == "lost" for change in current.changes)
        )

    def exit_barrier(self, timeout_s: float) -> bool:
        """Wait until every node of the current world, and this one, has reached the end of the job
        (torch's own exit barrier waits for every node of the *first* world, a lost one included).
        False when some did not within ``timeout_s``."""
        self._call("set", soft_exit_key(self.node), str(time.time_ns()))
        keys = [soft_exit_key(node) for node in sorted({*self.current.members, self.node})]
        deadline = time.monotonic() + timeout_s
        while not self._call("check", keys):
            if time.monotonic() >= deadline:
                return False
            time.sleep(10 * POLL_INTERVAL_S)
        return True

    def fail_job(self, reason: str) -> None:
        """This node failed for good: every node ends its workers."""
        self._propose_covering(self._append("fatal", reason))

    def join(self, timeout_s: float) -> World:
        """This node's restarted workers (or, for a pod that joins the running job, its first ones)
        are ready: wait for the world that takes it in."""
        reason = "" if self.node in self.initial else "a pod that joined the running job"
        version = self._propose_covering(self._append("join", reason))
        self.current = dataclasses.replace(self.current, version=version - 1)
        return self.next_world(timeout_s)

    def peek(self) -> World:
        """The next proposed world as proposed (not yet formed); call after :meth:`change_proposed`."""
        return self._world(self.current.version + 1)

    def _world(self, version: int) -> World:
        """World ``version`` as proposed; ``void`` when its proposal is no log length (or absent)."""
        key = soft_world_key(version)
        length = int_value(read_value(self._call, key), key, high=MAX_LOG_ENTRIES)
        if length is None:
            return World(version, self.current.members, void=True)
        changes = self._changes_through(length)
        members, fatal = members_after(self.initial, changes)
        return World(version, members, fatal, tuple(changes))

    def _decision(self, version: int) -> str | None:
        """World ``version``'s decision: ``None`` while undecided; anything but ``formed`` is not."""
        return _decision_text(read_value(self._call, soft_decided_key(version)), soft_decided_key(version))

    def _abandon(self, version: int) -> None:
        """World ``version`` will not form: make sure a next one is proposed. Where a newer proposal
        or a lost member abandoned it, that proposal is there already (the ``compare_set`` changes
        nothing); where only a decision that was not ours did, the next world is the log so far."""
        self._decide_once(version, ABANDONED)
        self._proposed_length(version + 1)

    def _decide_once(self, version: int, decision: str) -> str:
        """Propose ``decision`` for world ``version``; the one that won (the first proposal)."""
        key = soft_decided_key(version)
        won = _decision_text(self._call("compare_set", key, "", decision), key)
        return won if won is not None else ABANDONED

    # --- forming a world ----------------------------------------------------------------------

    def next_world(self, timeout_s: float) -> World:
        """Arrive at the next proposed world and return the first one that forms (or a fatal one).

        A world whose members do not all arrive within ``timeout_s`` is abandoned, and the members
        that never came are logged ``lost``: the others go on without them. A world of fewer than
        ``min_nodes`` nodes is not formed: the members wait (paused) for the next proposal, a node
        coming back, for up to ``timeout_s``. A void proposal is abandoned by every node alike.
        """
        version = self.current.version + 1
        while True:
            if version > MAX_LOG_ENTRIES + 1:
                raise WorldUnreadable(f"no world up to {MAX_LOG_ENTRIES + 1} could be formed")
            self._await_proposal(version, timeout_s)
            world = self._world(version)
            if world.void:
                self._abandon(version)
                version += 1
                continue
            if world.fatal is not None or self.node not in world.members:
                self.current = world
                return world
            if len(world.members) < self.min_nodes:
                logger.warning("soft restart: world %d would have %d nodes, fewer than the %d the job needs: "
                               "waiting for a node to come back", version, len(world.members), self.min_nodes)
                version += 1
                continue
            self._call("set", soft_arrive_key(version, self.node), str(time.time_ns()))
            decision = self._decide(world, timeout_s)
            if decision == FORMED:
                self.current = world
                logger.info("soft restart: world %d formed with nodes %s", version, world.members)
                return world
            if decision == SOFT_FINISHED_KEY:
                return dataclasses.replace(world, finished=True)
            self._abandon(version)
            version += 1

    def _await_proposal(self, version: int, timeout_s: float) -> None:
        key = soft_world_key(version)
        deadline = time.monotonic() + timeout_s
        while not self._call("check", [key]):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"soft restart: no world {version} was proposed within {timeout_s:g} s")
            time.sleep(POLL_INTERVAL_S)

    def _decide(self, world: World, timeout_s: float) -> str:
        arrivals = [soft_arrive_key(world.version, node) for node in world.members]
        newer = soft_world_key(world.version + 1)
        deadline = time.monotonic() + timeout_s
        while True:
            if (decided := self._decision(world.version)) is not None:
                return decided
            if self._call("check", arrivals):
                return self._decide_once(world.version, FORMED)
            if self._call("check", [newer]):
                return self._decide_once(world.version, ABANDONED)
            if self._call("check", [SOFT_FINISHED_KEY]):
                return SOFT_FINISHED_KEY  # not a decision: the members still training finish in their own world
            if time.monotonic() >= deadline:
                self._give_up_on_missing(world, arrivals)
                return self._decide_once(world.version, ABANDONED)
            time.sleep(POLL_INTERVAL_S)

    def _give_up_on_missing(self, world: World, arrivals: list[str]) -> None:
        missing = [node for node, key in zip(world.members, arrivals, strict=True) if not self._call("check", [key])]
        refused = may_name_missing(missing=len(missing), arrived=len(world.members) - len(missing) - 1,
                                   api=api_endpoint())
        if refused is not None:  # the isolation gate: a cut-off node writes no verdict, even into its own store
            logger.error("soft restart: nodes %s never arrived at world %d, but %s", missing, world.version, refused)
            return
        logger.warning("soft restart: nodes %s never arrived at world %d: going on without them", missing,
                       world.version)
        last = 0
        for node in missing:
            last = self._append("lost", f"never arrived at world {world.version}", node=node, name=f"node {node}")
        if last:
            self._propose_covering(last)


def _client(store: Any, timeout_s: float) -> BoundedStore:
    return BoundedStore(store, timeout_s, name="rendezvous store (soft restarts)")


def _job_nodes(call: Any) -> int | None:
    """The first world's node count of the running job (``job``); ``None`` when none runs yet, or
    when the value is no node count (logged: the pod then takes part in torch's rendezvous)."""
    entry = as_dict(json_value(read_value(call, SOFT_JOB_KEY), SOFT_JOB_KEY))
    nodes = None if entry is None else as_int(entry.get("nodes"), low=1, high=MAX_COUNT)
    if entry is not None and nodes is None:
        bad_value(SOFT_JOB_KEY, "no node count")
    return nodes


def _decision_text(value: bytes | None, key: str) -> str | None:
    """A decision read from ``key``: ``None`` when absent; one that is neither ``formed`` nor
    ``abandoned`` counts as ``abandoned`` (logged): every node reads the same bytes."""
    text = text_value(value, key, max_bytes=16)
    if value is not None and text not in (FORMED, ABANDONED):
        bad_value(key, "neither formed nor abandoned")
        return ABANDONED
    return text
