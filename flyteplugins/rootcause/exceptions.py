"""The Flyte 2 exceptions a failed job raises: the agreed root cause, with Flyte 2's recoverability.

Flyte 2's runtime turns the task's exception into ``<outputs>/error.pb`` (``convert_from_native_to_error``
then ``upload_error``): the exception's code and ``str()`` become ``ContainerError.code`` and
``message``, and only ``flyte.errors.NonRecoverableError`` makes the kind ``NON_RECOVERABLE`` (no
retry). Every failing pod raises the exception of the same :class:`AgreedReport`, so every pod's
``error.pb`` holds the same bytes, whichever pod writes last.
"""

from __future__ import annotations

from flyte.errors import NonRecoverableError, RuntimeSystemError, RuntimeUserError

from rootcause_engine.agent.diagnosis.agreed import AgreedReport
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.rank_0_outputs import MissingRank0Outputs

#: ``ContainerError.code`` of an agreed root cause (the UI shows it beside the message).
ERROR_CODE = "ElasticRootCause"
#: ``ContainerError.code`` of a hung agent none of whose workers failed.
AGENT_HUNG_CODE = "ElasticAgentHung"
#: ``ContainerError.code`` of a pod without rank 0 whose launch succeeded, when rank 0's pod wrote
#: neither ``outputs.pb`` nor ``error.pb`` in time.
RANK_0_OUTPUTS_MISSING_CODE = "Rank0OutputsMissing"


class ElasticRootCauseError(NonRecoverableError):
    """The job's root cause raised ``flyte.errors.NonRecoverableError``: Flyte 2 does not retry it."""

    def __init__(self, agreed: AgreedReport) -> None:
        super().__init__(agreed.message, code=ERROR_CODE)
        self.agreed = agreed
        self.worker = agreed.worker


class ElasticRootCauseRecoverableError(RuntimeUserError):
    """The job's root cause allows a retry by Flyte 2's rule: its exception is not a
    ``NonRecoverableError`` (a plain exception, a death by signal, a hang), or a pod was lost."""

    def __init__(self, agreed: AgreedReport) -> None:
        super().__init__(ERROR_CODE, agreed.message, agreed.worker)
        self.agreed = agreed


class AgentHungError(RuntimeSystemError):
    """The agent hung although no worker failed (every worker exited successfully): retryable."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(AGENT_HUNG_CODE, diagnosis.report)
        self.diagnosis = diagnosis


class Rank0OutputsMissingError(RuntimeSystemError):
    """The launch succeeded, but the pod holding global rank 0 wrote neither ``outputs.pb`` nor
    ``error.pb`` in time (it died or vanished after training): raised by a pod without rank 0, which
    would otherwise exit 0 and let the job read as succeeded with its outputs missing. A system
    error, so Flyte 2 retries it: the training itself did not fail
    (:mod:`flyteplugins.rootcause.rank_0_outputs`)."""

    def __init__(self, missing: MissingRank0Outputs) -> None:
        super().__init__(RANK_0_OUTPUTS_MISSING_CODE, missing.message, missing.worker)
        self.missing = missing


def root_cause_error(agreed: AgreedReport) -> ElasticRootCauseError | ElasticRootCauseRecoverableError:
    """The exception for the job's agreed report: non-recoverable where its root cause is."""
    return ElasticRootCauseRecoverableError(agreed) if agreed.recoverable else ElasticRootCauseError(agreed)
