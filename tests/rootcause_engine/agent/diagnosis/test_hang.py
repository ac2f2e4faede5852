"""Which live worker hung: the pure rule over probe answers and the peers' timeouts."""

from __future__ import annotations

import dataclasses

from rootcause_core.collectives import CollectivePosition
from rootcause_core.ordering import Role, TimeSource
from rootcause_engine.agent.death_watcher import ProcessExit
from rootcause_engine.agent.diagnosis.hang import hang_verdict, stalled_collective
from rootcause_engine.agent.diagnosis.selection import rank_failures
from rootcause_engine.agent.launch_ledger import LaunchedWorker
from rootcause_engine.agent.launch_record import WorkerRecord
from rootcause_engine.agent.worker_probe import ProbeAnswer
from rootcause_engine.worker.recorder import RecordedError

GLOO_TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation"
SLEEPING = 'Current thread 0x1 (most recent call first):\n  File "/app/train.py", line 12 in step\n'
IN_ALL_REDUCE = (
    'Current thread 0x1 (most recent call first):\n'
    '  File "/venv/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
    '  File "/app/train.py", line 13 in step\n'
)
STALLED = CollectivePosition("0", 4, "gloo:all_reduce", 1_000)
#: What a peer of rank 1 raises when rank 1 never reached ``init_process_group`` (gloo, the elastic agent's store).
INIT_TIMEOUT = "DistStoreError: wait timeout after 3000ms, keys: /worker/attempt_0/default_pg/0//cpu//0/1"
IN_INIT = (
    'Current thread 0x1 (most recent call first):\n'
    '  File "/venv/torch/distributed/distributed_c10d.py", line 1780 in init_process_group\n'
    '  File "/app/train.py", line 5 in main\n'
)
TEARDOWN_NS = 5_000


def _recorded(message: str, collectives: tuple[CollectivePosition, ...] = (), at: int = 4_000) -> RecordedError:
    return RecordedError(message, "tb", at, "builtins.RuntimeError", ("RuntimeError",), False, 0, 0, 0, "h", "pod-0",
                         1, collectives)


def _probe(stacks: str, collectives: tuple[CollectivePosition, ...] | None) -> ProbeAnswer:
    return ProbeAnswer(pid=2, asked_ns=4_500, stacks=stacks, collectives=collectives)


def test_the_stalled_collective_comes_from_a_timed_out_worker_or_a_peer_pods_announcement() -> None:
    timed_out = _recorded(GLOO_TIMEOUT, (CollectivePosition("0", 3, entered_ns=500), STALLED))
    assert stalled_collective([timed_out, None]) == STALLED
    # a user's own exception or a peer that left is no stalled collective
    assert stalled_collective([_recorded("ValueError: bad batch", (STALLED,))]) is None
    assert stalled_collective([_recorded("Connection closed by peer", (STALLED,))]) is None
    assert stalled_collective([None], announced=(STALLED,)) == STALLED


def test_a_rank_behind_the_stalled_collective_hung_since_it_entered_its_last_one() -> None:
    last = CollectivePosition("0", 3, "gloo:all_reduce", 700)
    verdict = hang_verdict(_probe(SLEEPING, (last,)), STALLED, 1)
    assert verdict is not None and verdict.last == last and verdict.last_progress_ns == 700
    assert "never entered all_reduce #4 of process group 0" in verdict.message()
    assert "its last was all_reduce #3 of process group 0" in verdict.message()
    assert SLEEPING in verdict.stacks_text()


def test_a_rank_that_entered_the_stalled_collective_did_not_hang_wherever_it_is_now() -> None:
    assert hang_verdict(_probe(SLEEPING, (STALLED,)), STALLED, 1) is None


def test_without_collectives_the_stacks_decide() -> None:
    verdict = hang_verdict(_probe(SLEEPING, None), STALLED, 1)
    assert verdict is not None and verdict.last is None
    assert verdict.last_progress_ns == STALLED.entered_ns  # its peers were in the collective then; it was not
    assert hang_verdict(_probe(IN_ALL_REDUCE, None), STALLED, 1) is None
    assert hang_verdict(_probe(IN_ALL_REDUCE, ()), STALLED, 1) is None


def test_nothing_is_called_hung_without_a_stalled_collective_or_a_probe() -> None:
    assert hang_verdict(_probe(SLEEPING, (CollectivePosition("0", 1),)), None, 1) is None
    assert hang_verdict(None, STALLED, 1) is None


def _evidence(local_rank: int, *, recorded: RecordedError | None, exit_ns: int, signal: int | None,
              probe: ProbeAnswer | None = None) -> WorkerRecord:
    launched = LaunchedWorker(0, local_rank, local_rank, 0, 100 + local_rank, f"/tmp/{local_rank}/error.json")
    return WorkerRecord(launched, ProcessExit(100 + local_rank, exit_ns, None if signal else 1, signal),
                          recorded, probe=probe)


def test_in_a_pod_the_hung_rank_is_the_root_cause_and_its_timed_out_peer_a_victim() -> None:
    timed_out = _evidence(0, recorded=_recorded(GLOO_TIMEOUT, (STALLED,)), exit_ns=5_200, signal=None)
    hung = _evidence(1, recorded=None, exit_ns=5_300, signal=15,
                     probe=_probe(SLEEPING, (CollectivePosition("0", 3, "gloo:all_reduce", 700),)))
    root, victim = rank_failures([timed_out, hung], signals_ns=TEARDOWN_NS, worker="pod-0", host="h")
    assert (root.global_rank, root.role, root.time_source, root.timestamp_ns) == (1, Role.CANDIDATE,
                                                                                 TimeSource.LAST_PROGRESS, 700)
    assert root.message.startswith("hung: it never entered all_reduce #4")
    assert (victim.global_rank, victim.role) == (0, Role.VICTIM)


def test_a_rank_ended_after_a_peer_pod_announced_its_timeout_is_named_from_the_announcement() -> None:
    hung = _evidence(0, recorded=None, exit_ns=5_300, signal=15, probe=_probe(SLEEPING, ()))
    (root,) = rank_failures([hung], signals_ns=TEARDOWN_NS, worker="pod-1", host="h", announced_stalls=(STALLED,))
    assert (root.role, root.timestamp_ns) == (Role.CANDIDATE, STALLED.entered_ns)
    (victim,) = rank_failures([hung], signals_ns=TEARDOWN_NS, worker="pod-1", host="h")
    assert victim.role == Role.VICTIM


def test_a_rank_that_raised_is_never_replaced_by_a_hang_verdict() -> None:
    raised = _evidence(0, recorded=_recorded("ValueError: bad batch", (CollectivePosition("0", 3),), at=900),
                       exit_ns=1_000, signal=None)
    busy = dataclasses.replace(
        _evidence(1, recorded=None, exit_ns=5_300, signal=15), probe=_probe(SLEEPING, (CollectivePosition("0", 3),))
    )
    root, victim = rank_failures([raised, busy], signals_ns=TEARDOWN_NS, worker="pod-0", host="h")
    assert (root.global_rank, root.role) == (0, Role.CANDIDATE) and victim.role == Role.VICTIM


def test_a_hung_rank_that_records_the_teardown_s_signal_is_still_the_hung_root_cause() -> None:
    """The teardown's SIGTERM reaches a hung rank sleeping in Python as torch's ``SignalException``,
    which its recorder writes down: recorded after the teardown began, it does not clear the verdict."""
    timed_out = _evidence(0, recorded=_recorded(GLOO_TIMEOUT, (STALLED,)), exit_ns=5_200, signal=None)
    signalled = _recorded("SignalException: Process 101 got signal: 15", at=TEARDOWN_NS + 50)
    hung = _evidence(1, recorded=signalled, exit_ns=5_300, signal=None,
                     probe=_probe(SLEEPING, (CollectivePosition("0", 3, "gloo:all_reduce", 700),)))
    root, _ = rank_failures([timed_out, hung], signals_ns=TEARDOWN_NS, worker="pod-0", host="h")
    assert (root.global_rank, root.role, root.exception_type) == (1, Role.CANDIDATE, None)
    assert root.message.startswith("hung: ")


def test_peers_that_timed_out_forming_the_group_name_the_rank_they_waited_for() -> None:
    (stall,) = [stalled_collective([_recorded(INIT_TIMEOUT, at=4_000_000_000)])]
    assert stall is not None and stall.is_init and stall.awaited == (1,)
    assert stall.entered_ns == 1_000_000_000  # when its wait began: its failure less the 3000 ms it waited


def test_the_rank_peers_waited_for_hung_wherever_it_is_stuck_and_even_without_an_answer() -> None:
    stall = stalled_collective([_recorded(INIT_TIMEOUT, at=4_000_000_000)])
    for probe in (_probe(SLEEPING, None), _probe(IN_INIT, None), None):
        verdict = hang_verdict(probe, stall, 1)
        assert verdict is not None and verdict.named and verdict.last_progress_ns == 1_000_000_000
        assert "never entered the initialisation of process group 0" in verdict.message()
        assert "waited for its key in the rendezvous store" in verdict.message()
    assert "did not answer the agent's probe" in hang_verdict(None, stall, 1).message()
    assert hang_verdict(None, stall, 1).stacks_text() == ""


def test_a_stalled_initialisation_accuses_no_rank_its_peers_did_not_name() -> None:
    """A soft restart's paused worker waits for its world outside torch.distributed, as a rank that
    never came would: only the peers' keys accuse (gloo names the first rank missing)."""
    stall = stalled_collective([_recorded(INIT_TIMEOUT, at=4_000_000_000)])
    assert hang_verdict(_probe(SLEEPING, None), stall, 3) is None
    assert hang_verdict(_probe(IN_INIT, None), stall, 2) is None
    assert hang_verdict(None, stall, 2) is None


def test_in_a_pod_the_rank_that_never_formed_the_group_is_the_root_cause_and_its_peer_a_victim() -> None:
    timed_out = _evidence(0, recorded=_recorded(INIT_TIMEOUT, at=4_000_000_000), exit_ns=4_100_000_000, signal=None)
    hung = _evidence(1, recorded=None, exit_ns=4_300_000_000, signal=15, probe=_probe(IN_INIT, None))
    root, victim = rank_failures([timed_out, hung], signals_ns=4_200_000_000, worker="pod-0", host="h")
    assert (root.global_rank, root.role, root.time_source, root.timestamp_ns) == (
        1, Role.CANDIDATE, TimeSource.LAST_PROGRESS, 1_000_000_000)
    assert (victim.global_rank, victim.role) == (0, Role.VICTIM)


def test_a_pod_told_of_a_stalled_initialisation_names_its_rank_the_peers_waited_for() -> None:
    stall = stalled_collective([_recorded(INIT_TIMEOUT, at=4_000_000_000)])
    alone = dataclasses.replace(_evidence(0, recorded=None, exit_ns=5_300, signal=15),
                                launched=LaunchedWorker(0, 0, 1, 1, 100, "/tmp/0/error.json"))
    (root,) = rank_failures([alone], signals_ns=TEARDOWN_NS, worker="pod-1", host="h", announced_stalls=(stall,))
    assert (root.global_rank, root.role, root.timestamp_ns) == (1, Role.CANDIDATE, 1_000_000_000)


#: A ring of blocking send/recv (gloo's Flight Recorder numbers none of them); rank 2 hung before it sent.
IN_RECV = (
    'Current thread 0x1 (most recent call first):\n'
    '  File "/venv/torch/distributed/distributed_c10d.py", line 2790 in recv\n'
    '  File "/app/train.py", line 14 in step\n'
)
LAST_BARRIER = CollectivePosition("0", 2, "gloo:barrier", 300)


def _recv_from(peer: int, at: int) -> CollectivePosition:
    return CollectivePosition("0", 7, "recv", at, (peer,))


def test_point_to_point_timeouts_in_a_ring_together_name_the_peers_they_waited_for() -> None:
    neighbour = _recorded(GLOO_TIMEOUT, (LAST_BARRIER, _recv_from(2, 1_000)))
    further = _recorded(GLOO_TIMEOUT, (LAST_BARRIER, _recv_from(3, 1_100)))
    stalled = stalled_collective([neighbour, further])
    assert stalled is not None and stalled.is_point_to_point and stalled.awaited == (2, 3)
    assert stalled.describe() == "a point-to-point recv with rank 2, 3 in process group 0"
    # a peer pod's announced recv stall joins this pod's
    assert stalled_collective([further], announced=(_recv_from(2, 1_000),)).awaited == (2, 3)


def test_a_named_peer_outside_torch_distributed_hung_and_one_waiting_for_its_own_peer_did_not() -> None:
    stalled = CollectivePosition("0", 7, "recv", 1_000, (2, 3))
    verdict = hang_verdict(_probe(SLEEPING, (LAST_BARRIER,)), stalled, 2)
    assert verdict is not None and verdict.named and verdict.last_progress_ns == LAST_BARRIER.entered_ns
    assert "its peers waited for it there" in verdict.message()
    # rank 3 waits in its own recv (for rank 2): a victim; its last collective is the same barrier
    assert hang_verdict(_probe(IN_RECV, (LAST_BARRIER, _recv_from(2, 1_000))), stalled, 3) is None
    # a rank nobody waited for is not accused, wherever it is; nor a named one that never answered
    assert hang_verdict(_probe(SLEEPING, (LAST_BARRIER,)), stalled, 5) is None
    assert hang_verdict(None, stalled, 2) is None


def test_in_a_pod_the_rank_its_neighbour_waited_for_is_the_root_cause() -> None:
    timed_out = _evidence(0, recorded=_recorded(GLOO_TIMEOUT, (LAST_BARRIER, _recv_from(1, 1_000))),
                          exit_ns=5_200, signal=None)
    hung = _evidence(1, recorded=None, exit_ns=5_300, signal=15, probe=_probe(SLEEPING, (LAST_BARRIER,)))
    root, victim = rank_failures([timed_out, hung], signals_ns=TEARDOWN_NS, worker="pod-0", host="h")
    assert (root.global_rank, root.role, root.timestamp_ns) == (1, Role.CANDIDATE, LAST_BARRIER.entered_ns)
    assert root.message.startswith("hung: it never entered a point-to-point recv with rank 1")
    assert (victim.global_rank, victim.role) == (0, Role.VICTIM)


class _LateStalls:
    """Their stall, announced only to a pod that waits for it."""

    def __init__(self, stall: CollectivePosition) -> None:
        self.stall, self.waits = stall, []

    def announce(self, stalled: CollectivePosition | None = None) -> None:
        pass

    def stalls(self, wait_s: float = 0.0) -> tuple[CollectivePosition, ...]:
        self.waits.append(wait_s)
        return (self.stall,) if wait_s > 0 else ()

    def done(self) -> None:
        pass


class _NoLostPods:
    def search(self) -> tuple:
        return ()


class _LatePeers:
    """Peer pods whose collective timeout is announced only after this pod's victims failed."""

    def __init__(self, stall: CollectivePosition) -> None:
        self.failures = _LateStalls(stall)
        self.lost_pods = _NoLostPods()

    def watch_note(self) -> None:
        return None

    def members(self) -> tuple:
        return ()


CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:9123"


def test_a_pod_of_victims_waits_for_the_peer_s_stall_that_names_its_live_worker_hung() -> None:
    """gloo closes the pairs of a collective that timed out: the hung rank's neighbour sees
    "connection closed" before the rank that timed out announces where. The pod waits for that word."""
    from rootcause_engine.agent.diagnosis.pipeline import diagnose
    from rootcause_engine.agent.launch_record import LaunchRecord

    closed = _evidence(0, recorded=_recorded(CLOSED, (LAST_BARRIER,), at=4_000), exit_ns=4_100, signal=None)
    hung = _evidence(1, recorded=None, exit_ns=5_300, signal=15, probe=_probe(SLEEPING, (LAST_BARRIER,)))
    stall = CollectivePosition("0", 3, "gloo:broadcast", 2_000)
    peers = _LatePeers(stall)
    diagnosis = diagnose(LaunchRecord(0, (closed, hung), teardown_ns=TEARDOWN_NS, signals_ns=TEARDOWN_NS), peers=peers)
    assert diagnosis is not None and peers.failures.waits[-1] > 0
    assert (diagnosis.failures[0].global_rank, diagnosis.failures[0].role) == (1, Role.CANDIDATE)
    # a live worker waiting in a collective of its own gives no reason to wait: victims it is
    in_collective = dataclasses.replace(hung, probe=_probe(IN_ALL_REDUCE, None))
    peers = _LatePeers(stall)
    record = LaunchRecord(0, (closed, in_collective), teardown_ns=TEARDOWN_NS, signals_ns=TEARDOWN_NS)
    diagnosis = diagnose(record, peers=peers)
    assert diagnosis is not None and peers.failures.waits == [0.0] and diagnosis.failures[0].role == Role.VICTIM
