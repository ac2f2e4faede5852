"""Every key the engine keeps in torch's rendezvous store: one layout, one rank space. The peer watch,
the hang watch, the agreement and the soft-restart world of every pod meet in the same store. A key
spelled in two places, or a rank that is a group rank in one place and a node index in another, is a
verdict nobody reads. So every key is spelled here once, in one of two scopes: the round's store
(:data:`ROUND`) and the job's store (:data:`SOFT`). What each value holds, and how it is checked, is
in :mod:`rootcause_engine.agent.store_values`.
"""

from __future__ import annotations

#: The round's keys.
ROUND = "rootcause/"
#: The round's ledger (``agent/round_ledger.py``): its length (an atomic ``add`` numbers each event).
ROUND_EVENTS_KEY = f"{ROUND}events/len"
#: The report the failing pods agreed on (the first proposal wins: ``compare_set``).
AGREED_KEY = f"{ROUND}agree/decided"


def round_event_key(index: int) -> str:
    """Event ``index`` (from 1) of the round's ledger: a pod joined, failed, finished, said its word,
    read the decision, or was found lost."""
    return f"{ROUND}events/{index}"


def alive_key(group_rank: int) -> str:
    """A pod's heartbeat (its wall time, rewritten every beat)."""
    return f"{ROUND}alive/{group_rank}"


def hang_wait_key(group_rank: int) -> str:
    """The waits a pod's hang watch published (a rank that has waited half of ``hang_after_s``)."""
    return f"{ROUND}hang/wait/{group_rank}"


def said_key(group_rank: int) -> str:
    """What a failing pod saw, for the agreement (its ``PodWord``)."""
    return f"{ROUND}agree/said/{group_rank}"


#: The job's soft-restart keys.
SOFT = "rootcause/soft/"
#: The membership log's length (an atomic ``add`` numbers each entry).
SOFT_LOG_LENGTH_KEY = f"{SOFT}log/len"
#: A node's workers all returned: the training is over.
SOFT_FINISHED_KEY = f"{SOFT}finished"
#: The job is running: the first world's node count.
SOFT_JOB_KEY = f"{SOFT}job"
#: How many pods joined the running job (their node indexes follow the first world's).
SOFT_ADDED_KEY = f"{SOFT}added"
#: Under the job's store: the prefix of each world's process group (``soft_process_group_prefix``).
SOFT_PROCESS_GROUP = f"{SOFT}pg"


def soft_log_key(index: int) -> str:
    """Entry ``index`` (from 1) of the membership log: ``leave``, ``join``, ``fatal`` or ``lost``."""
    return f"{SOFT}log/{index}"


def soft_world_key(version: int) -> str:
    """World ``version``'s proposal: the log length it covers (the first proposal wins)."""
    return f"{SOFT}world/{version}"


def soft_decided_key(version: int) -> str:
    """World ``version``'s decision: ``formed`` or ``abandoned`` (the first decision wins)."""
    return f"{SOFT}decided/{version}"


def soft_arrive_key(version: int, node: int) -> str:
    """Node ``node`` is ready for world ``version``."""
    return f"{SOFT}arrive/{version}/{node}"


def soft_exit_key(node: int) -> str:
    """Node ``node`` reached the end of the job (the exit barrier of a world that is not the first)."""
    return f"{SOFT}exit/{node}"


def soft_lost_key(node: int) -> str:
    """Which node logged node ``node`` lost first (one ``compare_set``: the others follow)."""
    return f"{SOFT}lost/{node}"


def soft_peers_prefix(version: int) -> str:
    """The prefix of world ``version``'s peer watch (its round keys, :data:`ROUND`, live under it)."""
    return f"{SOFT}peers/{version}"


def soft_process_group_prefix(version: int) -> str:
    """The prefix of world ``version``'s process group store (the workers' ``init_process_group``)."""
    return f"{SOFT_PROCESS_GROUP}/{version}"
