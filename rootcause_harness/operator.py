"""The training operator's decision on a simulated PyTorchJob, and the output prefix Flyte reads then.

Why this decides every figure: a real cluster does not wait for the last pod. The Kubeflow training
operator (``PyTorchJob`` ``UpdateJobStatus``) marks a job with an ``ElasticPolicy`` (every ``Elastic``
and ``ElasticRootCause`` task) **Succeeded as soon as one worker pod exits 0**, and **Failed as soon
as one exits non-zero** (Flyte sets ``RestartPolicy: Never``). Flyte reads the error documents (or
the outputs) only on Succeeded, and at that moment; on Failed it shows "Job failed ... Worker
replica(s) failed" and reads nothing. So the console's answer is whatever the prefix holds at the
first pod's exit, if that exit is 0.

A pod's exit counts only when its kubelet reports it: a lost node (every process SIGKILLed at once,
kernel panic, power loss) and a frozen one (SIGSTOP, a VM paused by its host) report nothing, so
their pods' exits never decide. A preempted or evicted pod (SIGTERM from its kubelet, SIGKILL after
the grace period) reports its exit like any other.

:class:`Operator` watches the pods' exits (the simulator calls :meth:`Operator.pod_exited` the
moment it sees one), decides once, and on Succeeded copies the output prefix's files right away
(before another pod can add one) into a snapshot folder each flavour then reads with its backend's
rule (Flyte 1: upstream propeller's Go rule over ``error*.pb`` with distributed error aggregation,
or ``error.pb`` alone without; Flyte 2: ``error.pb``).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

#: Where (in a job's simulation folder) the operator keeps the output prefix as it was at its decision.
SNAPSHOT_DIR = "at-operator-decision"


class JobPhase(enum.StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    #: no pod whose exit counts exited before the simulator stopped (every other pod was silent)
    UNDECIDED = "Undecided"


@dataclasses.dataclass(frozen=True)
class OperatorDecision:
    """The job's phase, which pod's exit decided it (its name and exit code, as Kubernetes reports
    it: 128 + the signal for a pod killed by one), when, and, on Succeeded, the output prefix's files
    as they were at that moment."""

    phase: JobPhase
    pod: str | None = None
    code: int | None = None
    decided_ns: int | None = None
    snapshot: Path | None = None

    @property
    def succeeded(self) -> bool:
        return self.phase == JobPhase.SUCCEEDED


def kubernetes_exit_code(returncode: int) -> int:
    """A container's exit code as Kubernetes reports it: a process killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


#: Copies the files directly under the job's output prefix into a local folder (each flavour's store).
PrefixCopier = Callable[[Path], None]


class Operator:
    """Decides a simulated job's phase at the first counted pod exit (see the module docstring)."""

    def __init__(self, copy_prefix: PrefixCopier, snapshot_dir: Path) -> None:
        self._copy_prefix = copy_prefix
        self._snapshot_dir = snapshot_dir
        self._decision: OperatorDecision | None = None

    def pod_exited(self, pod: str, returncode: int, *, reported: bool) -> None:
        """Pod ``pod`` ended with ``returncode`` (``Popen``'s: negative for a signal); ``reported``:
        its kubelet saw it (a lost or frozen node's never does). The first reported exit decides."""
        if self._decision is not None or not reported:
            return
        code = kubernetes_exit_code(returncode)
        decided_ns = time.time_ns()
        if code != 0:
            self._decision = OperatorDecision(JobPhase.FAILED, pod, code, decided_ns)
            return
        self._snapshot_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._copy_prefix(self._snapshot_dir)
        except OSError as error:  # the prefix's store stopped answering: Flyte's read would fail too
            logger.warning("could not read the output prefix at the operator's decision: %s", error)
        self._decision = OperatorDecision(JobPhase.SUCCEEDED, pod, code, decided_ns, self._snapshot_dir)

    @staticmethod
    def never() -> OperatorDecision:
        """The decision of a job no operator watched."""
        return OperatorDecision(JobPhase.UNDECIDED)

    @property
    def decision(self) -> OperatorDecision:
        return self._decision if self._decision is not None else OperatorDecision(JobPhase.UNDECIDED)


def copy_local_prefix(prefix: Path) -> PrefixCopier:
    """A copier for a local folder used as the bucket: the files directly under ``prefix`` (where
    Flyte lists ``error*.pb`` and reads ``error.pb`` and ``outputs.pb``), bytes as they are now."""

    def copy(into: Path) -> None:
        for path in sorted(prefix.iterdir()) if prefix.is_dir() else ():
            if path.is_file():
                try:
                    (into / path.name).write_bytes(path.read_bytes())
                except FileNotFoundError:  # a temporary file renamed meanwhile
                    continue

    return copy


@dataclasses.dataclass(frozen=True)
class ConsoleView:
    """What the console shows at the operator's decision: the job's outcome and, for a failure read
    from an error document, the pod and rank it names (``None`` where it names none)."""

    decision: OperatorDecision
    #: ``"success"``: outputs read; ``"error"``: an error document read; ``"job failed"``: the operator
    #: failed the job, nothing read; ``"outputs missing"``: Succeeded, but neither outputs nor an error
    #: document were there; ``"read failed"``: an error document could not be read; ``"undecided"``
    outcome: str
    worker: str | None = None
    rank: int | None = None
    message: str = ""
    recoverable: bool | None = None

    def line(self) -> str:
        """The demos' one line for scripts: ``operator: job=<phase> at=<pod> code=<code> console=<pod|none>``."""
        decision = self.decision
        return (
            f"operator: job={decision.phase} at={decision.pod or 'none'} "
            f"code={'none' if decision.code is None else decision.code} console={self.worker or 'none'}"
        )


def undecided_view(decision: OperatorDecision) -> ConsoleView | None:
    """The view when the operator read nothing (the job Failed, or never decided); ``None`` when it
    Succeeded and the flavour must read its snapshot."""
    if decision.phase == JobPhase.FAILED:
        return ConsoleView(decision, "job failed")
    if decision.phase == JobPhase.UNDECIDED or decision.snapshot is None:
        return ConsoleView(decision, "undecided")
    return None
