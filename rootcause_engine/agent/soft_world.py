"""Soft restarts: how the pods agree on the next world without torch's rendezvous.

Why: torch's ``DynamicRendezvousHandler`` polls its store once a second, and its last-call wait is a
whole number of seconds. Survivors would pay 1-2 s per change. So the first world *is* torch's
rendezvous, and every later one is agreed here, with a few keys in the job's store. A log of
membership events says who left, joined or was lost. The first proposal of a world wins, and the
first decision on it too, so all pods agree. The keys and their rules: ``docs/soft_restarts.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from rootcause_core.liveness import SILENCE_LIMIT_S
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.isolation_gate import api_endpoint, may_name_missing
from rootcause_engine.agent.soft_world_store import ABANDONED, FORMED, MAX_LOG_ENTRIES, SoftWorldStore
from rootcause_engine.store_layout import SOFT_ADDED_KEY, SOFT_LOG_LENGTH_KEY

logger = logging.getLogger(__name__)

#: How often a node waiting for the other members of a world looks at the store.
POLL_INTERVAL_S = 0.01
#: The deadline of each store call (a frozen store host): the peer watch's silence limit by default.
STORE_TIMEOUT_S = SILENCE_LIMIT_S
#: What :meth:`SoftWorld._decide` answers when the training ended before the world formed (no decision).
_TRAINING_OVER = "finished"


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
    class reads and writes its soft-world keys only through :attr:`keys`, their typed operations."""

    def __init__(self, store: Any, node: int, name: str, initial: Sequence[int], min_nodes: int = 1, *,
                 store_timeout_s: float = STORE_TIMEOUT_S, keys: SoftWorldStore | None = None) -> None:
        self.store = store
        self.node = node
        self.name = name
        self.initial = tuple(initial)
        self.min_nodes = min_nodes
        self.current = World(0, tuple(sorted(initial)))
        self.keys = keys if keys is not None else SoftWorldStore(store, store_timeout_s)
        self._proposals = _Proposals(self.keys, node, name, self.initial)
        #: entering a world other than by following a change: the first one, a join
        self.entry = WorldEntry(self, self._proposals)
        #: the end of the job: which barrier, and this world's own
        self.exit = ExitBarrier(self)

    def close(self) -> None:
        """Release the store client's helper thread (the loop is over)."""
        self.keys.close()

    # --- the job: a pod that finds it running, and its end -------------------------------------

    @staticmethod
    def running_job_nodes(store: Any, store_timeout_s: float = STORE_TIMEOUT_S) -> int | None:
        """The first world's node count of the job running in ``store``; ``None`` if none runs yet."""
        keys = SoftWorldStore(store, store_timeout_s)
        try:
            return keys.job.nodes()
        finally:
            keys.close()

    @classmethod
    def join_running(cls, store: Any, name: str, min_nodes: int = 1, *,
                     store_timeout_s: float = STORE_TIMEOUT_S) -> SoftWorld | None:
        """A pod arriving once the job runs: a fresh node index after every earlier one, and the
        latest formed world as the current one (its ``entry.join`` then asks for the next). ``None``
        (and nothing written) when no job runs yet: the pod takes part in torch's rendezvous."""
        keys = SoftWorldStore(store, store_timeout_s)
        try:
            initial = keys.job.nodes()
            added = None if initial is None else keys.job.count_added_pod()
        except BaseException:  # a store that failed: its client's thread ends here too
            keys.close()
            raise
        if initial is None:
            keys.close()
            return None
        if added is None:
            keys.close()
            raise WorldUnreadable(f"the count of pods that joined the running job ({SOFT_ADDED_KEY}) is no count")
        world = cls(store, initial - 1 + added, name, range(initial), min_nodes, keys=keys)
        world.current = world.entry.latest_formed()
        return world

    def announce_finished(self) -> None:
        """This node's workers all returned: the training is over."""
        self.keys.job.mark_finished()

    def job_finished(self) -> bool:
        return self.keys.job.finished()

    # --- this node's changes --------------------------------------------------------------------

    def leave(self, reason: str, *, fatal: bool = False) -> None:
        """This node failed and restarts its workers: the others go on without it. ``fatal``: its
        failure ends the job instead (log op ``fatal``): every node ends its workers."""
        self._proposals.cover(self._proposals.log("fatal" if fatal else "leave", reason), self.current.version)

    def remove_lost(self, node: int, name: str, reason: str) -> bool:
        """Another node is lost (the peer watch's verdict: a vanished or frozen pod): the others go on
        without it. The first node to say so logs it (one ``compare_set``); False for the others."""
        if not self.keys.log.claim_lost(node, by=self.node):
            return False
        self._proposals.cover(self._proposals.log("lost", reason, node=node, name=name), self.current.version)
        return True

    # --- following the changes: forming each next world -----------------------------------------

    def change_proposed(self) -> bool:
        """Whether a world after the current one was proposed (one store round trip)."""
        return self.keys.worlds.proposed(self.current.version + 1)

    def peek(self) -> World:
        """The next proposed world as proposed (not yet formed); call after :meth:`change_proposed`."""
        return self._proposals.world(self.current.version + 1, self.current.members)

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
            world = self._proposals.world(version, self.current.members)
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
            self.keys.worlds.arrive(version, self.node)
            decision = self._decide(world, timeout_s)
            if decision == FORMED:
                self.current = world
                logger.info("soft restart: world %d formed with nodes %s", version, world.members)
                return world
            if decision == _TRAINING_OVER:
                return dataclasses.replace(world, finished=True)
            self._abandon(version)
            version += 1

    def _await_proposal(self, version: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.keys.worlds.proposed(version):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"soft restart: no world {version} was proposed within {timeout_s:g} s")
            time.sleep(POLL_INTERVAL_S)

    def _decide(self, world: World, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            if (decided := self.keys.worlds.decision(world.version)) is not None:
                return decided
            if self.keys.worlds.all_arrived(world.version, world.members):
                return self.keys.worlds.decide(world.version, FORMED)
            if self.keys.worlds.proposed(world.version + 1):
                return self.keys.worlds.decide(world.version, ABANDONED)
            if self.keys.job.finished():
                return _TRAINING_OVER  # not a decision: the members still training finish in their own world
            if time.monotonic() >= deadline:
                self._give_up_on_missing(world)
                return self.keys.worlds.decide(world.version, ABANDONED)
            time.sleep(POLL_INTERVAL_S)

    def _abandon(self, version: int) -> None:
        """World ``version`` will not form: make sure a next one is proposed. Where a newer proposal
        or a lost member abandoned it, that proposal is there already (the ``compare_set`` changes
        nothing); where only a decision that was not ours did, the next world is the log so far."""
        self.keys.worlds.decide(version, ABANDONED)
        self._proposals.propose(version + 1)

    def _give_up_on_missing(self, world: World) -> None:
        missing = [node for node in world.members if not self.keys.worlds.arrived(world.version, node)]
        refused = may_name_missing(missing=len(missing), arrived=len(world.members) - len(missing) - 1,
                                   api=api_endpoint())
        if refused is not None:  # the isolation gate: a cut-off node writes no verdict, even into its own store
            logger.error("soft restart: nodes %s never arrived at world %d, but %s", missing, world.version, refused)
            return
        logger.warning("soft restart: nodes %s never arrived at world %d: going on without them", missing,
                       world.version)
        last = 0
        for node in missing:
            last = self._proposals.log("lost", f"never arrived at world {world.version}", node=node,
                                       name=f"node {node}")
        if last:
            self._proposals.cover(last, self.current.version)


class WorldEntry:
    """How a node enters a world other than by following a change (``world.entry``): the first one
    (torch's rendezvous; the job is announced, so later pods join it), and a join: this node's
    restarted workers, or a pod that joined the running job, from the latest formed world."""

    def __init__(self, world: SoftWorld, proposals: _Proposals) -> None:
        self._world = world
        self._proposals = proposals

    def announce_running(self) -> None:
        """The first world formed: a pod that arrives from now on joins it (:meth:`SoftWorld.join_running`)."""
        self._world.keys.job.announce(len(self._world.initial))

    def join(self, timeout_s: float) -> World:
        """This node's restarted workers (or, for a pod that joins the running job, its first ones)
        are ready: wait for the world that takes it in."""
        world = self._world
        reason = "" if world.node in world.initial else "a pod that joined the running job"
        version = self._proposals.cover(self._proposals.log("join", reason), world.current.version)
        world.current = dataclasses.replace(world.current, version=version - 1)
        return world.next_world(timeout_s)

    def latest_formed(self) -> World:
        """The newest world the pods formed (the current one if none formed since the first)."""
        latest = self._world.current
        for version in range(1, MAX_LOG_ENTRIES + 2):  # each world covers one more change at least
            decision = self._world.keys.worlds.decision(version)
            if decision is None:
                return latest
            if decision == FORMED and not (world := self._proposals.world(version, self._world.current.members)).void:
                latest = world
        raise WorldUnreadable(f"more than {MAX_LOG_ENTRIES + 1} worlds were decided")


class ExitBarrier:
    """The end of the job (``world.exit``): torch's exit barrier waits for every node of the *first*
    world, a lost one included, and knows no pod that joined later; past such a change the nodes of
    the current world wait for each other here instead."""

    def __init__(self, world: SoftWorld) -> None:
        self._world = world

    @property
    def uses_torch_barrier(self) -> bool:
        """Whether the job ends in torch's exit barrier rather than in :meth:`wait`: while no node was
        lost and none joined later, and this node is one of the first world's. Every node of a world
        decides alike (a node that restarted and never rejoined included), but one that joined the
        running job, which torch's barrier does not count."""
        world = self._world
        return (
            world.node in world.initial
            and set(world.current.members) <= set(world.initial)
            and not any(change.kind == "lost" for change in world.current.changes)
        )

    def wait(self, timeout_s: float) -> bool:
        """Wait until every node of the current world, and this one, has reached the end of the job.
        False when some did not within ``timeout_s``."""
        world = self._world
        world.keys.job.mark_exited(world.node)
        nodes = sorted({*world.current.members, world.node})
        deadline = time.monotonic() + timeout_s
        while not world.keys.job.all_exited(nodes):
            if time.monotonic() >= deadline:
                return False
            time.sleep(10 * POLL_INTERVAL_S)
        return True


class _Proposals:
    """The membership log and the worlds proposed over it (the module docstring), shared by a world
    and its entry: this node's changes logged, proposals covering them, worlds read as proposed."""

    def __init__(self, keys: SoftWorldStore, node: int, name: str, initial: tuple[int, ...]) -> None:
        self._keys = keys
        self._node = node
        self._name = name
        self._initial = initial

    def log(self, kind: str, reason: str = "", node: int | None = None, name: str | None = None) -> int:
        """Append a change (about this node unless ``node``); its index in the log."""
        change = Event(kind, self._node if node is None else node, name or self._name, reason, time.time_ns())
        index = self._keys.log.append(change)
        if index is None:
            raise WorldUnreadable(f"the membership log ({SOFT_LOG_LENGTH_KEY}) cannot take another change")
        return index

    def propose(self, version: int) -> int | None:
        """Propose world ``version`` as the log so far; the length of whichever proposal won
        (``None`` for one that is no length)."""
        length = self._keys.log.length()
        if length is None:
            raise WorldUnreadable(f"the membership log's length ({SOFT_LOG_LENGTH_KEY}) is no count")
        return self._keys.worlds.claim(version, length)

    def cover(self, index: int, current: int) -> int:
        """The first world after ``current`` whose proposal includes log entry ``index`` (proposing it
        if needed)."""
        for version in range(current + 1, MAX_LOG_ENTRIES + 2):
            length = self.propose(version)
            if length is not None and length >= index:
                return version
        raise WorldUnreadable(f"no world up to {MAX_LOG_ENTRIES + 1} covers membership change {index}")

    def world(self, version: int, members_if_void: tuple[int, ...]) -> World:
        """World ``version`` as proposed; ``void`` (with ``members_if_void``) when its proposal is no
        log length (or absent)."""
        length = self._keys.worlds.length(version)
        if length is None:
            return World(version, members_if_void, void=True)
        changes = self._keys.log.changes_through(length, poll_s=POLL_INTERVAL_S)
        members, fatal = members_after(self._initial, changes)
        return World(version, members, fatal, tuple(changes))
