"""What the Flyte 2 UI shows for a simulated action, read where the backend reads it: at the operator's decision.

Flyte 2's backend reads an action's outcome only when the PyTorchJob Succeeded (a pod exited 0), and
then ``<outputs>/error.pb`` before ``outputs.pb``, as the prefix is at that moment. Its
``ContainerError`` has no worker: the pod and rank are the ones the message names (``verdict``).
"""

from __future__ import annotations

from collections.abc import Callable

from flyteidl2.core import execution_pb2
from google.protobuf.message import DecodeError

from rootcause_harness.flyte2.job import JobResult
from rootcause_harness.flyte2.verdict import Verdict, rootcause_verdict
from rootcause_harness.operator import ConsoleView, undecided_view


def console_at_decision(result: JobResult, verdict: Callable[[str], Verdict] = rootcause_verdict) -> ConsoleView:
    """The UI's view of ``result`` at the operator's decision; ``verdict`` reads the pod and rank an
    ``error.pb`` names (this plugin's agreed report by default)."""
    decision = result.operator
    view = undecided_view(decision)
    if view is not None:
        return view
    assert decision.snapshot is not None
    error_pb = decision.snapshot / "error.pb"
    if error_pb.exists():
        document = execution_pb2.ErrorDocument()
        try:
            document.ParseFromString(error_pb.read_bytes())
        except DecodeError as error:
            return ConsoleView(decision, "read failed", message=f"error.pb is not an ErrorDocument: {error}")
        message = document.error.message
        worker, rank = verdict(message)
        recoverable = document.error.kind != execution_pb2.ContainerError.NON_RECOVERABLE
        return ConsoleView(decision, "error", worker, rank, message, recoverable)
    return ConsoleView(decision, "success" if (decision.snapshot / "outputs.pb").exists() else "outputs missing")
