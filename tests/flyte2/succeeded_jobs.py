"""What the tests of Flyte 2 jobs that succeeded check of the action's ``error.pb``."""

from __future__ import annotations

from flyteplugins.rootcause.simulation.job import JobResult

#: What a succeeded job's pod without rank 0 writes to ``error.pb``: Flyte 2 serializes the ``None``
#: the task returns there (only rank 0 returns the function's value, upstream's ``Elastic`` too) and
#: fails the output's type check; ``a0`` still exits 0.
NO_RANK_0_OUTPUT_CODE = "DataValidationError"


def assert_only_the_pod_without_rank_0_wrote_an_error(result: JobResult) -> None:
    """A job that succeeded: no ``error.pb`` but, possibly, the one of a pod without rank 0's output."""
    document = result.error_document
    assert result.error_pb != "torn", f"pod logs in {result.sim_dir}"
    if document is not None:
        assert document.error.code == NO_RANK_0_OUTPUT_CODE, (document.error.message, result.sim_dir)
