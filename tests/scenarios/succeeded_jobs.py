"""What the tests of Flyte 2 jobs that succeeded check of the action's files."""

from __future__ import annotations

from rootcause_harness.flyte2.job import JobResult


def assert_no_pod_wrote_an_error(result: JobResult) -> None:
    """A job that succeeded: no ``error.pb`` (the backend reads it before ``outputs.pb``), the pod
    without rank 0's output included (:func:`flyteplugins.rootcause.upstream.leave_outputs_to_rank_0`)."""
    assert result.error_pb == "missing", f"error.pb {result.error_pb}; pod logs in {result.sim_dir}"
