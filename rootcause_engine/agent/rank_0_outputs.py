"""A pod without global rank 0 exits only once rank 0's pod has written the task's outputs.

Why: the Kubeflow training operator marks an elastic PyTorchJob ``Succeeded`` as soon as *any* pod
exits 0. Flyte reads the task's outputs at that moment. Only rank 0's pod writes them. So a pod
without rank 0 waits until rank 0's outputs or an error document is in the task's output prefix.
If neither comes within the bound, it raises :class:`MissingRank0Outputs`, a recoverable error.
The loop is pure and shared by both front-ends. How, with the bounds: ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Sequence

from rootcause_core.safe_text import exception_summary
from rootcause_core.testimony import Member

logger = logging.getLogger(__name__)

#: The file rank 0's pod writes under the task's output prefix on success (flytekit's and Flyte 2's
#: runtime both name it so).
OUTPUTS_FILE_NAME = "outputs.pb"

#: The first pause between two looks at the store. Rank 0's pod usually writes its outputs within a
#: second of leaving the exit barrier; a short first pause costs a pod little time at its end.
POLL_INTERVAL_S = 0.2
#: The longest pause between two looks. The pauses grow (x1.5) to this: when rank 0's pod uploads a
#: large value for minutes, a thousand waiting pods at 0.2 s would send the bucket some ten
#: thousand requests a second. Exiting up to this much after ``outputs.pb`` appeared costs nothing:
#: rank 0's pod itself exits 0 only after writing it, and that exit already ends the job.
MAX_POLL_INTERVAL_S = 2.0
_POLL_GROWTH = 1.5

#: How long a pod stopped by its kubelet (SIGTERM) still waits: a third of the default 30 s grace,
#: leaving the rest to write its document and exit 0 before the SIGKILL.
STOPPED_WAIT_S = 10.0

#: How rank 0's pod is named when this pod does not know it (the peers' membership was not read).
UNKNOWN_RANK_0_POD = "the pod holding global rank 0"


class Rank0Outcome(enum.Enum):
    """What the wait found in the task's output prefix."""

    OUTPUTS = "outputs"  # rank 0's pod wrote outputs.pb
    ERROR = "error"  # an error document is there: the job failed after training, and says why
    NEITHER = "neither"  # the bound passed with neither


@dataclasses.dataclass(frozen=True)
class Rank0Wait:
    """The wait's outcome, how long it took (the caller's clock) and how many looks it made."""

    outcome: Rank0Outcome
    waited_s: float
    looks: int
    #: the last look that failed (a store error), summarized; ``None`` when every look was answered
    last_look_error: str | None = None
    #: the wait was cut short because the kubelet stopped this pod (SIGTERM)
    stopped: bool = False


#: One look at the store: ``True`` when the file (or any file of the kind) is there.
Look = Callable[[], bool]


def wait_for_rank_0_outputs(
    outputs_written: Look,
    error_written: Look,
    *,
    timeout_s: float,
    stopped_at: Callable[[], float | None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_interval_s: float = POLL_INTERVAL_S,
    max_poll_interval_s: float = MAX_POLL_INTERVAL_S,
) -> Rank0Wait:
    """Look at the store until rank 0's outputs or an error document is there, or ``timeout_s`` passed.

    The first look is made at once (rank 0's pod is often done already) and one more after the
    bound, so a pod never gives up on a file it did not look for last. A look that raises (a store
    that answered with an error, a network blip) counts as "not there yet": a transient store error
    must not turn a job that succeeded into a failure; if the bound passes, the last such error is
    in the outcome for the message. ``stopped_at``: when the kubelet's SIGTERM came (on ``clock``),
    ``None`` before; from then on the wait ends within :data:`STOPPED_WAIT_S`.
    """
    started = clock()
    looks = 0
    last_error: str | None = None
    interval = poll_interval_s
    while True:
        looks += 1
        for look, outcome in ((outputs_written, Rank0Outcome.OUTPUTS), (error_written, Rank0Outcome.ERROR)):
            try:
                found = look()
            except Exception as error:  # the store's failure is reported if the bound passes
                last_error = exception_summary(error)
                continue
            if found:
                return Rank0Wait(outcome, clock() - started, looks, last_error)
        now = clock()
        stop = stopped_at()
        deadline = started + timeout_s if stop is None else min(started + timeout_s, stop + STOPPED_WAIT_S)
        if now >= deadline:
            return Rank0Wait(Rank0Outcome.NEITHER, now - started, looks, last_error, stopped=stop is not None)
        sleep(min(interval, deadline - now))
        interval = min(interval * _POLL_GROWTH, max_poll_interval_s)


def rank_0_pod(members: Sequence[Member]) -> str | None:
    """The pod holding global rank 0 among ``members`` (this pod's view of the round); ``None`` unknown."""
    return next((member.worker for member in members if 0 in member.global_ranks), None)


def own_ranks(members: Sequence[Member], worker: str) -> range | None:
    """The global ranks of ``worker``'s workers, as the round placed them; ``None`` unknown."""
    return next((member.global_ranks for member in members if member.worker == worker), None)


@dataclasses.dataclass(frozen=True)
class MissingRank0Outputs:
    """A wait that ended with neither file: what the front-end's recoverable error says."""

    wait: Rank0Wait
    output_prefix: str
    #: this pod, and its global ranks (``None``: unknown)
    worker: str
    ranks: range | None
    #: the pod holding global rank 0, where this pod read the peers' membership
    rank_0_worker: str | None

    @property
    def message(self) -> str:
        """This pod and its ranks, rank 0's pod, where this pod looked and how long, and what to change
        if rank 0's pod was only slow."""
        holder = UNKNOWN_RANK_0_POD if self.rank_0_worker is None else f"{UNKNOWN_RANK_0_POD} ({self.rank_0_worker})"
        lines = [
            f"Training finished on every rank, but {holder} wrote neither {OUTPUTS_FILE_NAME} nor an error "
            f"document under {self.output_prefix}: this pod waited {self.wait.waited_s:.0f} s for them. That "
            "pod died or vanished after training, or its upload is stuck.",
            f"This pod ({self.worker}, {_ranks_text(self.ranks)}) fails so that the job is not read as "
            "succeeded with its outputs missing (the training operator marks a job Succeeded when any of its "
            "pods exits 0); a retry runs the task again.",
            "If rank 0's outputs take longer than that to write (a large value uploaded from its pod), raise "
            "rank_0_outputs_timeout_s.",
        ]
        if self.wait.stopped:
            lines[0] += (f" The kubelet stopped this pod (SIGTERM) while it waited: it stopped waiting "
                         f"{STOPPED_WAIT_S:.0f} s later, to write this before the grace ends.")
        if self.wait.last_look_error is not None:
            lines.append(f"The store's last error while looking: {self.wait.last_look_error}")
        return "\n".join(lines)


def _ranks_text(ranks: range | None) -> str:
    if not ranks:
        return "its global ranks unknown"
    return f"global rank {ranks[0]}" if len(ranks) == 1 else f"global ranks {ranks[0]}-{ranks[-1]}"


def missing_outputs(
    wait: Rank0Wait, *, output_prefix: str, worker: str, members: Sequence[Member]
) -> MissingRank0Outputs | None:
    """``None`` when the wait found rank 0's outputs or an error document (this pod may exit now; the
    log says after how long); else what the pod's error must say (``members``: the round's
    membership as this pod's peer watch read it)."""
    if wait.outcome != Rank0Outcome.NEITHER:
        found = OUTPUTS_FILE_NAME if wait.outcome == Rank0Outcome.OUTPUTS else "an error document"
        logger.info("Found %s under %s after %.1f s: this pod (without global rank 0) exits now",
                    found, output_prefix, wait.waited_s)
        return None
    return MissingRank0Outputs(wait, output_prefix, worker, own_ranks(members, worker), rank_0_pod(members))
