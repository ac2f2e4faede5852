"""The straggler pre-check on Flyte 2: ``ElasticRootCause(straggler_check=...)``, the engine's check
with Flyte 2's report tab and non-recoverable error."""

from __future__ import annotations

from pathlib import Path

import pytest
from flyte.errors import NonRecoverableError

from flyteplugins.rootcause import ElasticRootCause, StragglerCheck, StragglerDetectedError
from flyteplugins.rootcause.straggler import Flyte2StragglerFrontEnd, read_published_report
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from rootcause_engine.straggler.settings import StragglerConfigError
from rootcause_engine.worker.recorder import refuses_retry
from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.job import JobSpec, run_job
from tests.scenarios.succeeded_jobs import assert_no_pod_wrote_an_error


def _report(*verdicts: str) -> StragglerReport:
    nodes = [NodeResult(i, f"pod-{i}", "h", 1, compute_score=1.0, comm_score=1.0, verdict=v)
             for i, v in enumerate(verdicts)]
    return StragglerReport(nodes=nodes, threshold=1.3, network_threshold=2.0, rounds=2, action="fail")


def test_the_check_s_settings_are_refused_before_launch_as_on_flytekit() -> None:
    with pytest.raises(StragglerConfigError, match="nnodes as a range"):
        ElasticRootCause(nnodes=2, nproc_per_node=1, max_restarts=1, straggler_check=StragglerCheck(action="exclude"))
    with pytest.raises(StragglerConfigError, match="StragglerCheck"):
        ElasticRootCause(nnodes=2, nproc_per_node=1, straggler_check="yes")  # type: ignore[arg-type]
    exclude = StragglerCheck(action="exclude")
    assert ElasticRootCause(nnodes="2:3", nproc_per_node=1, max_restarts=1, straggler_check=exclude)


def test_a_failed_check_raises_flyte_2_s_non_recoverable_error_naming_the_slow_node() -> None:
    error = Flyte2StragglerFrontEnd("unused").detected_error(_report("ok", "slow-compute"), "")
    assert isinstance(error, StragglerDetectedError) and isinstance(error, NonRecoverableError)
    assert refuses_retry(error)  # the recorder marks it: the agreed root cause is NON_RECOVERABLE
    assert "pod 'pod-1' (node rank 1) is slow-compute" in str(error)


def test_rank_0_s_report_reaches_the_agent_and_a_torn_one_is_no_report(tmp_path: Path) -> None:
    path = str(tmp_path / "report.json")
    assert read_published_report(path) is None  # not rank 0's pod
    Flyte2StragglerFrontEnd(path).publish(_report("ok", "ok"))
    read = read_published_report(path)
    assert read is not None and [n.pod for n in read.nodes] == ["pod-0", "pod-1"]
    Path(path).write_text('{"nodes": [{"no": 1}]')
    assert read_published_report(path) is None


@pytest.mark.slow
def test_a_job_with_the_check_trains_and_shows_the_check_in_its_report(tmp_path: Path) -> None:
    """Two real ``a0`` pods: every worker runs the check before training, rank 0's pod shows it in the
    "Straggler check" tab of the action's report, and the action succeeds."""
    spec = JobSpec(task=training.train_2x1_checked, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket",
                   timeout_s=180)
    result = run_job(spec, work_dir=tmp_path / "pods")
    logs = f"pod logs in {result.sim_dir}"
    assert not result.timed_out and all(pod.returncode == 0 for pod in result.pods), logs
    assert result.output is not None, logs
    assert_no_pod_wrote_an_error(result)
    report = (result.output_prefix / "report.html").read_text()
    assert "Straggler check" in report and "train-worker-0" in report and "train-worker-1" in report, logs
    assert "straggler scores per node" in report, logs  # the chart
    pod_logs = "".join(pod.log_path.read_text() for pod in result.pods)
    assert "compute s (per round)" in pod_logs, logs  # rank 0's table, in its pod log
