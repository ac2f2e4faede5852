"""What a report and the Deck say about the soft restarts a job went through."""

from __future__ import annotations

from flytekitplugins_rootcause.report import restarts_html
from rootcause_engine.agent.event_log import Event
from rootcause_engine.agent.soft_restart_agent import SoftRestartSession, history_note, history_rows
from rootcause_engine.agent.worker_channel import WorkerChannel


def _session(tmp_path: object) -> SoftRestartSession:
    return SoftRestartSession(
        worker="pod-0", channel=WorkerChannel(str(tmp_path)), diagnose=lambda failed: None,
        end_workers=lambda: None, timeout_s=10,
    )


def test_every_node_s_changes_are_listed_in_order_in_the_report_and_the_deck(tmp_path: object) -> None:
    session = _session(tmp_path)
    assert history_note(session) == "" and history_rows(session) == []
    session.changes = (
        Event("leave", 1, "pod-1", "<b>rank 3</b> raised", 1_000_000_000),
        Event("join", 1, "pod-1", "", 2_000_000_000),
    )
    session.worlds = [(0, (0, 1), 500_000_000), (1, (0,), 1_100_000_000), (2, (0, 1), 2_100_000_000)]
    note = history_note(session)
    assert note.splitlines()[0].startswith("Soft restarts before this failure")
    assert "pod-1 failed; its workers restarted while the others went on without it: <b>rank 3</b> raised" in note
    assert note.index("pod-1 failed") < note.index("pod-1 joined the world")
    assert "1: nodes [0] at 1970-01-01T00:00:01.100000000Z" in note
    page = restarts_html(history_rows(session))
    assert "&lt;b&gt;rank 3&lt;/b&gt; raised" in page and "<b>rank 3</b>" not in page  # escaped
    assert page.count("<tr>") == 3  # header and two changes


def test_a_node_still_restarting_when_the_training_finished_says_so(tmp_path: object) -> None:
    session = _session(tmp_path)
    session.changes = (Event("leave", 0, "pod-0", "rank 1 raised", 1_000_000_000),)
    session.finished_while_restarting_ns = 3_000_000_000
    rows = history_rows(session)
    assert [row[1] for row in rows] == ["pod-0", "pod-0"]
    assert rows[-1][0] == 3_000_000_000 and "restarting (or joining) when the training finished" in rows[-1][2]
    assert "when the training finished without it" in restarts_html(rows)


def test_a_verdict_of_a_later_world_s_peer_watch_names_the_node_not_its_rank_there(tmp_path: object) -> None:
    """A world with a pod that joined the running job has its own peer watch, ranking its members
    densely (nodes 0, 2, 3 are ranks 0, 1, 2): a verdict on rank 2 takes node 3 out, not node 2."""
    from rootcause_core.testimony import LostPod

    session = _session(tmp_path)
    session.peers_lost((LostPod(2, "pod-2", None),))
    assert [peer.group_rank for peer in session.take_lost()] == [2]  # the first world: rank is node
    session.peer_nodes = (0, 2, 3)
    session.peers_lost((LostPod(2, "pod-2", 5), LostPod(7, "odd", None)))
    assert [(peer.group_rank, peer.worker) for peer in session.take_lost()] == [(3, "pod-2"), (7, "odd")]
