"""Soft restarts: how the pods agree on the next world without torch's rendezvous.

Why not torch's ``DynamicRendezvousHandler`` for every change: its join loop polls the store once a
second (``_delay(seconds=1)`` on every ``SYNC``), its last-call wait is a whole number of seconds
(``last_call_timeout`` is read with ``get_as_int`` and must be > 0), and a member can only leave a
complete round by joining the next one. Survivors would pay 1-2 s per change. The first world *is*
torch's rendezvous (group ranks, store, master address); every later one is agreed here, in that
round's store (the c10d rendezvous store, alive as long as the job), with a few keys:

- ``log/len`` and ``log/<i>``: an append-only log of membership changes (``leave``: a node failed
  and restarts its workers; ``join``: its workers are ready again; ``fatal``: a failure that ends
  the job; ``lost``: a member that never arrived, or that the peer watch found lost: a pod that
  vanished or froze). Appending is one atomic ``add`` for the index.
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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

_PREFIX = "rootcause/soft/"
_LOG_LENGTH = f"{_PREFIX}log/len"
_FINISHED = f"{_PREFIX}finished"
_JOB = f"{_PREFIX}job"
_ADDED = f"{_PREFIX}added"
FORMED, ABANDONED = "formed", "abandoned"

#: How often a node waiting for the other members of a world looks at the store.
POLL_INTERVAL_S = 0.01


@dataclasses.dataclass(frozen=True)
class Change:
    """One entry of the membership log."""

    op: str  # "leave" | "join" | "fatal" | "lost"
    node: int
    name: str
    reason: str = ""
    time_ns: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Change:
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class World:
    """A world the pods agreed on: its version, its nodes in rank order, and the fatal change, if any."""

    version: int
    members: tuple[int, ...]
    fatal: Change | None = None
    changes: tuple[Change, ...] = ()
    finished: bool = False  # the training ended before this world formed

    def group_rank(self, node: int) -> int:
        return self.members.index(node)

    @property
    def grew(self) -> bool:
        """Whether the change that made this world was a node (re)joining (else one leaving)."""
        return bool(self.changes) and self.changes[-1].op == "join"


def members_after(initial: Sequence[int], changes: Sequence[Change]) -> tuple[tuple[int, ...], Change | None]:
    """The nodes of a world whose log is ``changes`` (in node order), and the first fatal change."""
    nodes = set(initial)
    fatal = None
    for change in changes:
        if change.op in ("leave", "lost", "fatal"):
            nodes.discard(change.node)
        elif change.op == "join":
            nodes.add(change.node)
        if change.op == "fatal" and fatal is None:
            fatal = change
    return tuple(sorted(nodes)), fatal


class SoftWorld:
    """This node's view of the agreed worlds (see the module docstring)."""

    def __init__(self, store: Any, node: int, name: str, initial: Sequence[int], min_nodes: int = 1) -> None:
        self.store = store
        self.node = node
        self.name = name
        self.initial = tuple(initial)
        self.min_nodes = min_nodes
        self.current = World(0, tuple(sorted(initial)))

    # --- a job running, and pods that join it later ------------------------------------------

    def announce_running(self) -> None:
        """The first world formed: a pod that arrives from now on joins it (:meth:`join_running`)."""
        self.store.set(_JOB, json.dumps({"nodes": len(self.initial)}))

    @staticmethod
    def running_job_nodes(store: Any) -> int | None:
        """The first world's node count of the job running in ``store``; ``None`` if none runs yet."""
        if not store.check([_JOB]):
            return None
        return int(json.loads(store.get(_JOB))["nodes"])

    @classmethod
    def join_running(cls, store: Any, name: str, min_nodes: int = 1) -> SoftWorld | None:
        """A pod arriving once the job runs: a fresh node index after every earlier one, and the
        latest formed world as the current one (its :meth:`join` then asks for the next). ``None``
        (and nothing written) when no job runs yet: the pod takes part in torch's rendezvous."""
        initial = cls.running_job_nodes(store)
        if initial is None:
            return None
        node = initial - 1 + int(store.add(_ADDED, 1))
        world = cls(store, node, name, range(initial), min_nodes)
        world.current = world.latest_formed()
        return world

    def latest_formed(self) -> World:
        """The newest world the pods formed (the first one if none formed since)."""
        version, latest = 1, self.current
        while self.store.check([f"{_PREFIX}decided/{version}"]):
            if self.store.get(f"{_PREFIX}decided/{version}").decode() == FORMED:
                latest = self._world(version)
            version += 1
        return latest

    # --- log and proposals ---------------------------------------------------------------------

    def _append(self, op: str, reason: str = "", node: int | None = None, name: str | None = None) -> int:
        index = int(self.store.add(_LOG_LENGTH, 1))
        change = Change(op, self.node if node is None else node, name or self.name, reason, time.time_ns())
        self.store.set(f"{_PREFIX}log/{index}", change.to_json())
        return index

    def _log(self, length: int) -> list[Change]:
        return [Change.from_json(self.store.get(f"{_PREFIX}log/{i}")) for i in range(1, length + 1)]

    def _proposed_length(self, version: int) -> int:
        """Propose world ``version`` as the log so far; the length of whichever proposal won."""
        length = int(self.store.add(_LOG_LENGTH, 0))
        won = self.store.compare_set(f"{_PREFIX}world/{version}", "", str(length))
        return int(won)

    def _propose_covering(self, index: int) -> int:
        """The first world whose proposal includes log entry ``index`` (proposing it if needed)."""
        version = self.current.version + 1
        while self._proposed_length(version) < index:
            version += 1
        return version

    def announce_finished(self) -> None:
        """This node's workers all returned: the training is over."""
        self.store.set(_FINISHED, str(time.time_ns()))

    def job_finished(self) -> bool:
        return bool(self.store.check([_FINISHED]))

    def change_proposed(self) -> bool:
        """Whether a world after the current one was proposed (one store round trip)."""
        return bool(self.store.check([f"{_PREFIX}world/{self.current.version + 1}"]))

    def leave(self, reason: str) -> None:
        """This node failed and restarts its workers: the others go on without it."""
        self._propose_covering(self._append("leave", reason))

    def remove_lost(self, node: int, name: str, reason: str) -> bool:
        """Another node is lost (the peer watch's verdict: a vanished or frozen pod): the others go on
        without it. The first node to say so logs it (one ``compare_set``); False for the others."""
        claimed = self.store.compare_set(f"{_PREFIX}lost/{node}", "", str(self.node))
        if claimed.decode() != str(self.node):
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
            and not any(change.op == "lost" for change in current.changes)
        )

    def exit_barrier(self, timeout_s: float) -> bool:
        """Wait until every node of the current world, and this one, has reached the end of the job
        (torch's own exit barrier waits for every node of the *first* world, a lost one included).
        False when some did not within ``timeout_s``."""
        self.store.set(f"{_PREFIX}exit/{self.node}", str(time.time_ns()))
        keys = [f"{_PREFIX}exit/{node}" for node in sorted({*self.current.members, self.node})]
        deadline = time.monotonic() + timeout_s
        while not self.store.check(keys):
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
        length = int(self.store.get(f"{_PREFIX}world/{version}"))
        changes = self._log(length)
        members, fatal = members_after(self.initial, changes)
        return World(version, members, fatal, tuple(changes))

    # --- forming a world ----------------------------------------------------------------------

    def next_world(self, timeout_s: float) -> World:
        """Arrive at the next proposed world and return the first one that forms (or a fatal one).

        A world whose members do not all arrive within ``timeout_s`` is abandoned, and the members
        that never came are logged ``lost``: the others go on without them. A world of fewer than
        ``min_nodes`` nodes is not formed: the members wait (paused) for the next proposal, a node
        coming back, for up to ``timeout_s``.
        """
        version = self.current.version + 1
        while True:
            self._await_proposal(version, timeout_s)
            world = self._world(version)
            if world.fatal is not None or self.node not in world.members:
                self.current = world
                return world
            if len(world.members) < self.min_nodes:
                logger.warning("soft restart: world %d would have %d nodes, fewer than the %d the job needs: "
                               "waiting for a node to come back", version, len(world.members), self.min_nodes)
                version += 1
                continue
            self.store.set(f"{_PREFIX}arrive/{version}/{self.node}", str(time.time_ns()))
            decision = self._decide(world, timeout_s)
            if decision == FORMED:
                self.current = world
                logger.info("soft restart: world %d formed with nodes %s", version, world.members)
                return world
            if decision == _FINISHED:
                return dataclasses.replace(world, finished=True)
            version += 1

    def _await_proposal(self, version: int, timeout_s: float) -> None:
        key = f"{_PREFIX}world/{version}"
        deadline = time.monotonic() + timeout_s
        while not self.store.check([key]):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"soft restart: no world {version} was proposed within {timeout_s:g} s")
            time.sleep(POLL_INTERVAL_S)

    def _decide(self, world: World, timeout_s: float) -> str:
        decided = f"{_PREFIX}decided/{world.version}"
        arrivals = [f"{_PREFIX}arrive/{world.version}/{node}" for node in world.members]
        newer = f"{_PREFIX}world/{world.version + 1}"
        deadline = time.monotonic() + timeout_s
        while True:
            if self.store.check([decided]):
                return self.store.get(decided).decode()
            if self.store.check(arrivals):
                return self.store.compare_set(decided, "", FORMED).decode()
            if self.store.check([newer]):
                return self.store.compare_set(decided, "", ABANDONED).decode()
            if self.store.check([_FINISHED]):
                return _FINISHED  # not a decision: the members still training finish in their own world
            if time.monotonic() >= deadline:
                self._give_up_on_missing(world, arrivals)
                return self.store.compare_set(decided, "", ABANDONED).decode()
            time.sleep(POLL_INTERVAL_S)

    def _give_up_on_missing(self, world: World, arrivals: list[str]) -> None:
        missing = [node for node, key in zip(world.members, arrivals, strict=True) if not self.store.check([key])]
        logger.warning("soft restart: nodes %s never arrived at world %d: going on without them", missing,
                       world.version)
        last = 0
        for node in missing:
            last = self._append("lost", f"never arrived at world {world.version}", node=node, name=f"node {node}")
        if last:
            self._propose_covering(last)
