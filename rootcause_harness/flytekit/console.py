"""What the Flyte 1 console shows for a simulated job, read where Flyte reads it: at the operator's decision.

flytepropeller reads a task's outputs or error only when the plugin reports success (the PyTorchJob
Succeeded: a pod exited 0), from the output prefix as it is then. With distributed error aggregation
on (``plugins.k8s.enable-distributed-error-aggregation``) it applies its Go reader's Earliest rule to
every ``error*.pb`` (``backend_reader.upstream_rule``, ported); off, it reads ``error.pb`` alone.
Without an error document it reads ``outputs.pb``; a Succeeded job without either fails with
"outputs not found".
"""

from __future__ import annotations

from collections.abc import Callable

import fsspec

from backend_reader.upstream_rule import UpstreamReadError, earliest_error, read_upstream_document
from rootcause_core.error_files import ERROR_FILE_NAME
from rootcause_core.roles import rank_from_report
from rootcause_core.safe_text import MAX_DOCUMENT_BYTES
from rootcause_harness.flytekit.job import JobResult
from rootcause_harness.operator import ConsoleView, undecided_view


def console_at_decision(
    result: JobResult, *, aggregation: bool = True, rank_of: Callable[[str], int | None] = rank_from_report
) -> ConsoleView:
    """The console's view of ``result`` at the operator's decision; ``rank_of`` reads the rank an
    error's message names (this plugin's report line by default; torch's report for the baseline)."""
    decision = result.operator
    view = undecided_view(decision)
    if view is not None:
        return view
    assert decision.snapshot is not None
    fs, prefix = fsspec.filesystem("file"), str(decision.snapshot)
    try:
        if aggregation:
            pick = earliest_error(prefix, fs)
        else:
            shared = f"{prefix}/{ERROR_FILE_NAME}"
            pick = read_upstream_document(fs, shared, MAX_DOCUMENT_BYTES) if fs.exists(shared) else None
    except UpstreamReadError as error:
        return ConsoleView(decision, "read failed", message=str(error))
    if pick is not None:
        return ConsoleView(
            decision, "error", pick.worker or None, rank_of(pick.message), pick.message, pick.is_recoverable
        )
    return ConsoleView(decision, "success" if fs.exists(f"{prefix}/outputs.pb") else "outputs missing")
