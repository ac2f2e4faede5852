"""Soft restarts, agent side: the soft-restart RFC's run loop for torch's ``LocalElasticAgent``.

Why: torch's loop answers any failure with a hard restart. Every agent stops every worker and all
rendezvous again. This loop (``restart_policy="soft"``) keeps the survivors' processes instead. A
node whose worker failed restarts only its own workers and rejoins, if the failure is recoverable.
The other nodes pause their workers, agree on the new world (:mod:`.soft_world`), and go on. How,
case by case: ``docs/soft_restarts.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from torch.distributed import DistStoreError, PrefixStore
from torch.distributed.elastic.agent.server.api import RunResult
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from rootcause_core.testimony import LostPod
from rootcause_core.timestamps import rfc3339_ns
from rootcause_engine.agent.bounded_store import StoreUnresponsive
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.soft_world import STORE_TIMEOUT_S, SoftWorld, World
from rootcause_engine.agent.worker_channel import WorkerChannel
from rootcause_engine.store_layout import soft_peers_prefix
from rootcause_engine.upstream.torch_agent_loop import (
    AgentParts,
    is_failed,
    is_healthy,
    is_succeeded,
)
from rootcause_engine.upstream.torch_elastic import JoinedRound
from rootcause_engine.worker.world_events import WorkerEvent, WorkerInfo, WorldChangeEvent
from rootcause_engine.worker.world_events import WorkerState as ChannelState

logger = logging.getLogger(__name__)

@dataclasses.dataclass
class SoftRestartSession:
    """What one launch's soft-restart agent needs from the task, and what it leaves for the report.

    ``diagnose`` runs the diagnosis pipeline on a local failure (its launch record, no peers: the job
    goes on) and returns the diagnosis, recoverable or not (``None``: no worker failed);
    ``end_workers`` ends this node's running workers as victims (a fatal failure elsewhere).
    ``min_nodes``: the smallest world the job may go on with (``nnodes``' minimum). ``timeout_s``
    bounds a world change: members arriving at a new world, and a restarted node's workers getting
    ready (their own initialisation included). ``changes`` is the job's membership log as this node
    last saw it (every node's soft restarts, for the report and the Deck), ``worlds`` every world
    this node was part of (version, members, when formed). ``store_timeout_s``: the deadline of each
    store call of the world's agreement (a store whose host froze fails the call instead of blocking
    the loop).
    """

    worker: str
    channel: WorkerChannel
    diagnose: Callable[[ChildFailedError], Diagnosis | None]
    end_workers: Callable[[], None]
    timeout_s: float
    min_nodes: int = 1
    max_nodes: int | None = None
    store_timeout_s: float = STORE_TIMEOUT_S
    #: the peer watch starts over with a world's members (a world with a pod that joined the running
    #: job: the first rendezvous round's peer watch does not know it)
    watch_peers: Callable[[JoinedRound], None] | None = None
    #: the node of each group rank of the peer watch's round (``None``: the first world, rank = node)
    peer_nodes: tuple[int, ...] | None = None
    worlds: list[tuple[int, tuple[int, ...], int]] = dataclasses.field(default_factory=list)
    changes: tuple[Event, ...] = ()
    fatal_elsewhere: str | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    #: peers the peer watch declared lost (a vanished or frozen pod), not yet taken out of the world
    lost_pending: list[LostPod] = dataclasses.field(default_factory=list)
    #: the nodes ever told lost (the peer watch repeats every verdict so far with each new one)
    lost_told: set[int] = dataclasses.field(default_factory=set)
    #: when this node stopped its restarting workers because the training had finished without them
    finished_while_restarting_ns: int | None = None

    def peers_lost(self, lost: tuple[LostPod, ...]) -> None:
        """The peer watch declared ``lost`` (on its own thread): the loop scales down without them.
        Their group ranks become nodes (the peer watch of a later world ranks its members densely)."""
        with self.lock:
            nodes = self.peer_nodes
            for peer in lost:  # the watch tells every peer declared lost so far: each is taken once
                node = nodes[peer.group_rank] if nodes is not None and 0 <= peer.group_rank < len(nodes) else None
                mapped = peer if node is None else dataclasses.replace(peer, group_rank=node)
                if mapped.group_rank not in self.lost_told:
                    self.lost_told.add(mapped.group_rank)
                    self.lost_pending.append(mapped)

    def take_lost(self) -> list[LostPod]:
        with self.lock:
            taken, self.lost_pending = self.lost_pending, []
        return taken


_CHANGE_WORDS = {
    "leave": "failed; its workers restarted while the others went on without it",
    "join": "joined the world (its workers were ready)",
    "fatal": "failed for good",
    "lost": "was lost (it never arrived at a new world, or sent no heartbeat); the others went on without it",
}


#: How long a node's workers may still run once another node's workers have all returned.
FINISH_GRACE_S = 5.0
FINISHED_WHILE_RESTARTING = (
    "was still restarting (or joining) when the training finished without it: its workers were stopped, and "
    "the pod succeeded without claiming the task's output"
)
#: How often a pod waiting for room in a full running job looks at its latest world.
ROOM_POLL_INTERVAL_S = 0.2


def history_rows(session: SoftRestartSession) -> list[tuple[int, str, str, str]]:
    """Every node's membership changes this pod knows of, in order: (time ns, node, what, reason)."""
    with session.lock:
        changes, finished_ns = session.changes, session.finished_while_restarting_ns
    rows = [(c.time_ns, c.name, _CHANGE_WORDS.get(c.kind, c.kind), c.reason) for c in changes]
    if finished_ns is not None:
        rows.append((finished_ns, session.worker, FINISHED_WHILE_RESTARTING, ""))
    return rows


def history_note(session: SoftRestartSession) -> str:
    """The report's paragraph on what the job went through before (every node's changes, in order)."""
    rows = history_rows(session)
    if not rows:
        return ""
    with session.lock:
        worlds = list(session.worlds)
    lines = ["Soft restarts before this failure (every node's, from the job's membership log):"]
    lines += [f"  - {rfc3339_ns(at)} {node} {what}{f': {reason}' if reason else ''}" for at, node, what, reason in rows]
    if session.fatal_elsewhere:
        lines.append(f"  This pod's workers were ended because: {session.fatal_elsewhere}")
    lines.append(
        "  Worlds this pod was part of: "
        + "; ".join(f"{version}: nodes {list(members)} at {rfc3339_ns(at)}" for version, members, at in worlds)
    )
    return "\n".join(lines)


def _change_event(world: World) -> WorldChangeEvent:
    """What made ``world``, as the workers are told: the last membership change before it."""
    return WorldChangeEvent.SCALE_UP if world.grew else WorldChangeEvent.SCALE_DOWN


def _summary(diagnosis: Diagnosis | None) -> str:
    return "a worker failed and left no evidence" if diagnosis is None else diagnosis.summary


#: Why the log takes out a node whose kubelet is stopping it (its own word, before it goes).
STOPPED_REASON = "its kubelet stopped the pod (SIGTERM: preemption, drain, eviction or deletion)"

#: Why the log takes a lost pod out of the world (the peer watch does not say which sign it read).
LOST_REASON = "its processes ended without a word, or it fell silent: a lost, killed or frozen node"


class SoftRestartLoop:
    """The run loop of one launch's agents under ``restart_policy="soft"`` (module docstring)."""

    def __init__(self, session: SoftRestartSession) -> None:
        self.session = session
        self.parts: AgentParts
        self.world: SoftWorld
        self.failed_before = False  # a node is restarted once: its second failure ends the job

    def __call__(self, parts: AgentParts) -> RunResult:
        """Run the launch; a store call that found no answer within its deadline ends it as torch's
        agent ends one that lost the store (a ``DistStoreError``), so the front-end diagnoses it so."""
        try:
            return self._launch(parts)
        except StoreUnresponsive as error:
            raise DistStoreError(f"soft restart: {error}") from error
        except SignalException:
            self._leave_for_good(STOPPED_REASON)
            raise
        finally:
            world: SoftWorld | None = getattr(self, "world", None)
            if world is not None:
                world.close()

    def _leave_for_good(self, reason: str) -> None:
        """This node will not come back (its kubelet is stopping the pod): the log takes it out as a
        lost node, so the others scale down at once instead of waiting for it to restart."""
        world: SoftWorld | None = getattr(self, "world", None)
        if world is None:
            return
        try:
            world.remove_lost(world.node, self.session.worker, reason)
        except Exception as error:  # the store stopped answering: the peer watch finds the pod gone instead
            logger.warning("soft restart: could not take this node out of the world: %s", error)

    def _launch(self, parts: AgentParts) -> RunResult:
        self.parts = parts
        session = self.session
        job_store = parts.round.job_store
        running = None if job_store is None else SoftWorld.join_running(
            job_store, session.worker, session.min_nodes, store_timeout_s=session.store_timeout_s)
        if running is not None:
            return self._join_running_job(running)
        parts.round.rendezvous()
        if not parts.round.shares_rendezvous_store:
            raise RuntimeError(
                'restart_policy="soft" needs torch\'s shared rendezvous store (each new world\'s process group '
                "meets there): unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE and use the c10d rendezvous backend"
            )
        self.world = SoftWorld(job_store if job_store is not None else parts.round.store, parts.round.group_rank,
                               session.worker, range(parts.round.group_world_size), session.min_nodes,
                               store_timeout_s=session.store_timeout_s)
        self.world.entry.announce_running()
        self._world_formed(self.world.current)
        self._start_local_workers(self._healthy_events(self.world.current, None))
        return self._run()

    def _join_running_job(self, world: SoftWorld) -> RunResult:
        """This pod arrives once the job runs (Kubernetes rescheduled a lost pod, or the job started
        with fewer pods than ``nnodes``' maximum): it skips torch's rendezvous, whose round is closed,
        takes a new node index, waits until the world has room for it, starts its workers PAUSED and
        joins as a restarted node does (the others scale up at a step boundary)."""
        self.world = world
        logger.warning("soft restart: the job is running (world %d, nodes %s): joining it as node %d",
                       self.world.current.version, self.world.current.members, self.world.node)
        self.parts.round.enter_running_job(self.world.node, len(self.world.current.members) + 1)
        if self.world.job_finished():
            logger.warning("soft restart: the training already finished: nothing to join")
            self._note_finished_without_this_node()
            return self.parts.ending.finished_without_results()
        self._wait_for_room()
        try:
            unhealed = self._restart_and_join()
        except TimeoutError as exc:  # its workers never got ready, or the others never came
            self._give_up(exc)
            unhealed = None
        return unhealed if unhealed is not None else self._run()

    def _wait_for_room(self) -> None:
        """Wait until the latest world has fewer nodes than ``nnodes``' maximum (a lost pod this one
        replaces is taken out once the peer watch declares it lost)."""
        limit = self.session.max_nodes
        deadline = time.monotonic() + self.session.timeout_s
        while limit is not None and len(self.world.entry.latest_formed().members) >= limit:
            if time.monotonic() >= deadline:
                raise RuntimeError(f"soft restart: the running job kept its maximum of {limit} nodes for "
                                   f"{self.session.timeout_s:g} s: there is no room for {self.session.worker}")
            time.sleep(ROOM_POLL_INTERVAL_S)

    def _run(self) -> RunResult:
        """Poll the workers and follow the job's world until this node's workers are done."""
        parts = self.parts
        finished_seen: float | None = None
        while True:
            time.sleep(parts.workers.monitor_interval)
            self._scale_down_lost()
            result = parts.workers.poll()
            if is_succeeded(result):
                self.world.announce_finished()
                self._exit_barrier()
                return result
            if is_failed(result):
                if self.session.fatal_elsewhere is not None:
                    return result
                try:
                    unhealed = self._heal(result)
                except TimeoutError as exc:  # the restarted workers, or the others, never came
                    self._give_up(exc)
                    continue
                if unhealed is not None:
                    return unhealed
            elif is_healthy(result) and self.world.job_finished():
                # another node's workers all returned: these finish their last step within moments, or
                # (restarted just as the training ended) wait for a world that will never be whole
                finished_seen = finished_seen or time.monotonic()
                if time.monotonic() - finished_seen > FINISH_GRACE_S:
                    return self._finished_elsewhere()
            elif is_healthy(result) and self.world.change_proposed():
                try:
                    self._follow_change()
                except TimeoutError as exc:
                    self._give_up(exc)

    def _exit_barrier(self) -> None:
        """torch's exit barrier, which waits for every node of the first world; once the world is
        another (a node lost: torch's barrier would wait its whole timeout for it; or one that joined
        later, which torch's barrier does not count), a barrier of the current world's nodes instead,
        so the store's host still outlives the others' last use of the store."""
        if self.world.exit.uses_torch_barrier:
            self.parts.ending.exit_barrier()
        elif not self.world.exit.wait(self.session.timeout_s):
            logger.warning("soft restart: not every node of world %d reached the end within %g s",
                           self.world.current.version, self.session.timeout_s)

    def _scale_down_lost(self) -> None:
        """Take the peers the peer watch declared lost out of the world (the first node to see a
        verdict proposes it; every node then follows the change). A world that would fall below
        ``min_nodes`` cannot go on: the job ends, the lost pod named by every survivor's report."""
        lost = [peer for peer in self.session.take_lost() if peer.group_rank in self.world.current.members]
        if not lost:
            return
        names = ", ".join(peer.worker for peer in lost)
        remaining = set(self.world.current.members) - {peer.group_rank for peer in lost}
        if len(remaining) < self.session.min_nodes:
            self._give_up(TimeoutError(
                f"soft restart: {names} lost, and {len(remaining)} node(s) are fewer than the {self.session.min_nodes} "
                "the job needs"
            ))
            return
        for peer in lost:
            try:
                removed = self.world.remove_lost(peer.group_rank, peer.worker, LOST_REASON)
            except TimeoutError as exc:  # the store did not answer, or its log cannot take the change
                self._give_up(exc)
                return
            if removed:
                logger.warning("soft restart: %s is lost: the others go on without it", peer.worker)

    def _give_up(self, error: TimeoutError) -> None:
        """A world change did not complete in time: the job cannot go on as one. Tell the other nodes
        (a fatal change), end this node's workers (they become victims) and report why; the loop
        returns their failure next."""
        logger.error("%s: ending the job", error)
        self.session.fatal_elsewhere = str(error)
        try:
            self.world.leave(str(error), fatal=True)
        except (RuntimeError, OSError) as store_error:  # the store went with its pod: nobody to tell
            logger.warning("could not tell the other nodes: %s", store_error)
        self.session.end_workers()

    # --- a failure on this node ----------------------------------------------------------------

    def _heal(self, result: RunResult) -> RunResult | None:
        """Stop, diagnose, and restart this node softly if allowed; the result to return if not."""
        self.parts.workers.stop()
        if self.world.change_proposed() and (fatal := self.world.peek().fatal) is not None:
            self.session.fatal_elsewhere = f"{fatal.name}: {fatal.reason}"
            return result  # the job failed elsewhere first: this node's workers fell with it
        diagnosis = self.session.diagnose(self.parts.ending.child_failed_error(result))
        recoverable = diagnosis is not None and diagnosis.recoverable
        failed_before, self.failed_before = self.failed_before, True
        healable = recoverable and not failed_before and self.parts.ending.remaining_restarts > 0
        if not healable:
            why = "not recoverable" if not recoverable else (
                "this node failed before" if failed_before else "no restarts left")
            logger.error("soft restart: this node's failure ends the job (%s)", why)
            self.world.leave(_summary(diagnosis), fatal=True)
            return result
        logger.warning("soft restart: leaving the world, restarting this node's workers: %s", _summary(diagnosis))
        self.world.leave(_summary(diagnosis))
        self.parts.ending.use_restart()
        return self._restart_and_join()

    def _restart_and_join(self) -> RunResult | None:
        """Start this node's workers PAUSED, wait until they are ready, and join the next world; the
        result to return if they ended first or the training finished meanwhile."""
        paused = WorkerEvent(time.time(), ChannelState.PAUSED, WorldChangeEvent.SCALE_UP)
        self._start_local_workers({local_rank: paused for local_rank in self.parts.workers.ranks()})
        ended = self._wait_until_ready()
        if ended is not None:
            return self._heal(ended) if is_failed(ended) else ended
        world = self.world.entry.join(self.session.timeout_s)
        if world.finished:
            return self._finished_elsewhere()
        self._enter(world)
        return None

    def _finished_elsewhere(self) -> RunResult:
        """The training ended while this node restarted: its workers are not needed any more."""
        logger.warning("soft restart: the training finished while this node restarted; stopping its workers")
        self._note_finished_without_this_node()
        self.parts.workers.stop()
        self._exit_barrier()
        return self.parts.ending.finished_without_results()

    def _note_finished_without_this_node(self) -> None:
        """For the history (the log and the Deck): the training ended while this node was not in the world."""
        with self.session.lock:
            self.session.finished_while_restarting_ns = time.time_ns()

    def _wait_until_ready(self) -> RunResult | None:
        """Wait until every restarted worker waits for a world; the poll's result if they ended first."""
        deadline = time.monotonic() + self.session.timeout_s
        while not self.session.channel.waiting(self.parts.workers.pids()):
            result = self.parts.workers.poll()
            if not is_healthy(result):
                return result
            if self.world.job_finished():
                return self._finished_elsewhere()
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"soft restart: this node's restarted workers were not ready within {self.session.timeout_s:g} s"
                )
            time.sleep(min(self.parts.workers.monitor_interval, 0.05))
        return None

    # --- a change elsewhere --------------------------------------------------------------------

    def _follow_change(self) -> None:
        change = _change_event(self.world.peek())
        for local_rank in self.parts.workers.ranks():
            self.session.channel.publish(local_rank, WorkerEvent(time.time(), ChannelState.PAUSED, change))
        world = self.world.next_world(self.session.timeout_s)
        if not world.finished:  # else this node's workers are done with their last step: they return
            self._enter(world)

    def _enter(self, world: World) -> None:
        """Send this node's workers their place in ``world``; end them if the job failed elsewhere."""
        if world.fatal is not None or self.world.node not in world.members:
            with self.session.lock:
                self.session.changes = world.changes
            culprit = world.fatal
            self.session.fatal_elsewhere = (
                f"{culprit.name}: {culprit.reason}" if culprit is not None else "this node was left out of the job"
            )
            logger.error("soft restart: the job failed elsewhere (%s): ending this node's workers",
                         self.session.fatal_elsewhere)
            self.session.end_workers()
            return
        self._world_formed(world)
        for local_rank, event in self._healthy_events(world, _change_event(world)).items():
            self.session.channel.publish(local_rank, event)

    # --- helpers ---------------------------------------------------------------------------------

    def _world_formed(self, world: World) -> None:
        """Follow ``world`` in torch's worker group (ranks for return values) and in the timeline."""
        local = self.parts.workers.local_world_size
        rank = world.group_rank(self.world.node)
        self.parts.workers.set_ranks(rank * local, local * len(world.members))
        with self.session.lock:
            self.session.worlds.append((world.version, world.members, time.time_ns()))
            self.session.changes = world.changes
        if self.session.watch_peers is not None and not set(world.members) <= set(self.world.initial):
            # a pod that joined the running job is unknown to the first round's peer watch: start it
            # over with this world's members, in the job's store under the world's version
            with self.session.lock:
                self.session.peer_nodes = world.members
            self.session.watch_peers(JoinedRound(
                PrefixStore(soft_peers_prefix(world.version), self.world.store), rank, len(world.members),
                tuple(range(rank * local, (rank + 1) * local)),
            ))

    def _healthy_events(self, world: World, change: WorldChangeEvent | None) -> dict[int, WorkerEvent]:
        parts = self.parts
        master_addr, master_port = parts.round.world_store_address
        return {
            local_rank: WorkerEvent(
                time.time(),
                ChannelState.HEALTHY,
                change,
                WorkerInfo(
                    local_rank=local_rank,
                    role_rank=rank,
                    rank=rank,
                    local_world_size=parts.workers.local_world_size,
                    role_world_size=world_size,
                    world_size=world_size,
                    master_addr=master_addr,
                    master_port=master_port,
                    world_version=world.version,
                ),
            )
            for local_rank, (rank, world_size) in parts.workers.ranks().items()
        }

    def _start_local_workers(self, first_events: dict[int, WorkerEvent]) -> None:
        """Start this node's workers, each with a fresh channel file holding its first event."""
        for local_rank, event in first_events.items():
            self.session.channel.start_fresh(local_rank, event)
        self.parts.workers.start()
