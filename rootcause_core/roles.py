"""Tell victims apart from root-cause candidates, from the evidence a failure carries.

A *victim* failed because something else failed first: the agent tore it down (SIGTERM/SIGINT, or
SIGKILL after the grace period), or one of its collectives failed because a peer process left
(gloo/NCCL "connection closed/reset by peer", "remote process exited", an aborted communicator, a
collective timeout, ``DistNetworkError``, a closed rendezvous, a process group that never formed
because a peer never came: ``store_waits``). Everything else is a *candidate*.

The same classifier serves the agent (exception types and signals at hand) and the backend reader
(only the message text of an error document), so it is pure and lives in the shared core.
Messages written by this plugin start with a role marker (:func:`role_marker`), which wins over the
text patterns because the agent that wrote it knew more than the text shows.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable

from rootcause_core.ordering import Role
from rootcause_core.store_waits import awaits_peers

#: Exception type names (any class in the MRO) that mean "a peer or the agent ended this worker".
VICTIM_EXCEPTION_TYPES: frozenset[str] = frozenset(
    {
        "DistNetworkError",
        "RendezvousClosedError",
        "SignalException",
        "KeyboardInterrupt",
    }
)

#: Lower-case message fragments of collective/rendezvous errors caused by a peer leaving.
VICTIM_MESSAGE_PATTERNS: tuple[str, ...] = (
    "connection closed by peer",
    "connection reset by peer",
    "remote process exited",
    "communicator was aborted",
    "communicator aborted",
    "nccl communicator",
    "ncclremoteerror",
    "watchdog caught collective operation timeout",
    "rendezvous is closed",
    "rendezvous closed",
    "distnetworkerror",
    "process group was aborted",
)

#: Fragments that mean "a peer is gone" only inside a gloo transport error (on their own they are
#: too common: a user's own broken pipe or timeout is a root cause). A gloo collective that timed out
#: waited for a peer that never came: the peer is the root cause, this worker a victim.
GLOO_VICTIM_PATTERNS: tuple[str, ...] = (
    "broken pipe",
    "read error",
    "write error",
    "socket closed",
    "timed out waiting",
)

#: Signals the agent's teardown sends: SIGTERM (or SIGINT) first, SIGKILL after the grace period.
TEARDOWN_SIGNALS: frozenset[int] = frozenset({int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGKILL)})

#: The teardown signals nothing else on a training node sends to a worker: a death by one of these is
#: a teardown whenever it happened. (SIGKILL is also the OOM killer's and the node's signal, so a
#: SIGKILL death is a teardown only if the worker was still alive when the teardown's signals went out.)
TEARDOWN_ONLY_SIGNALS: frozenset[int] = TEARDOWN_SIGNALS - {int(signal.SIGKILL)}


def is_teardown_signal(name: str | None) -> bool:
    """True for the name (``SIGTERM``...) of a signal the agent's teardown sends."""
    return name in {signal.Signals(number).name for number in TEARDOWN_SIGNALS}

# The marker starts the report; flytekit's own formatting may put text before the report
# ("Trace: ... Message: ... ElasticRootCauseError: USER:RuntimeError: error=[root cause] ..."),
# so the first marker that starts a line or follows whitespace or "=" counts.
_MARKER_RE = re.compile(r"(?:^|[\s=])\[(root cause|victim|lost pod|lost link)\] ", re.IGNORECASE)
_MARKERS = {Role.VICTIM: "[victim]", Role.LOST_POD: "[lost pod]", Role.CANDIDATE: "[root cause]"}
#: The roles whose document can name the job's root cause (a victim's never does): what a pod that
#: leaves the answer to another pod waits for, in either flavour.
NAMING_ROLES = (Role.CANDIDATE, Role.LOST_POD)
_MARKED_ROLES = {"victim": Role.VICTIM, "lost pod": Role.LOST_POD, "lost link": Role.LOST_POD,
                 "root cause": Role.CANDIDATE}
#: The marker of a document written for a lost link (both ends alive): a lost pod's role, named so.
LOST_LINK_MARKER = "[lost link]"


def role_marker(role: Role) -> str:
    """The prefix this plugin puts on the first line of every error message it writes."""
    return _MARKERS[role]


def role_from_marker(message: str) -> Role | None:
    """Read the role marker of a report written by this plugin, if the message holds one."""
    match = _MARKER_RE.search(message)
    if match is None:
        return None
    return _MARKED_ROLES[match.group(1).lower()]


_REPORT_RANK_RE = re.compile(r"(?:^|[\s=])\[(?:root cause|victim)\] rank (\d+) ", re.IGNORECASE)


def rank_from_report(message: str) -> int | None:
    """The global rank a report of this plugin names on its marked first line, if any.

    ``ContainerError`` has no rank field; the report's summary line (``[root cause] rank 3 (local
    rank 1, ...``, see ``rootcause_engine.agent.diagnosis.report``) carries it.
    """
    match = _REPORT_RANK_RE.search(message)
    return int(match.group(1)) if match else None


def is_victim_message(message: str) -> bool:
    """True when the text looks like a collective/rendezvous failure caused by a peer leaving."""
    lowered = message.lower()
    if any(pattern in lowered for pattern in VICTIM_MESSAGE_PATTERNS):
        return True
    if "gloo" in lowered and any(pattern in lowered for pattern in GLOO_VICTIM_PATTERNS):
        return True
    # the default group's store wait for peers' keys: the peers never came (``store_waits``)
    return awaits_peers(message)


def classify_role(
    *,
    exception_types: Iterable[str] = (),
    message: str = "",
    signal_number: int | None = None,
    terminated_by_agent: bool = False,
) -> Role:
    """Classify one failure.

    Args:
        exception_types: names of the exception's classes (its MRO), if the worker raised.
        message: the exception or error-document message.
        signal_number: the signal that killed the process, if it died by one.
        terminated_by_agent: the worker was still alive, with no failure of its own, when the agent's
            teardown sent its first signal.
    """
    if terminated_by_agent:
        return Role.VICTIM
    if signal_number is not None and signal_number in TEARDOWN_ONLY_SIGNALS:
        return Role.VICTIM
    marked = role_from_marker(message)
    if marked is not None:
        return marked
    if any(name in VICTIM_EXCEPTION_TYPES for name in exception_types):
        return Role.VICTIM
    if is_victim_message(message):
        return Role.VICTIM
    return Role.CANDIDATE
