"""The worker's one call (``rootcause_engine/straggler/worker.py``): the check run for real by this process as the
one worker of a one-node job (gloo, loopback ``TCPStore``), and each action carried out on given reports (a check
with several nodes needs several processes: the scenarios run it)."""

from __future__ import annotations

import logging
import pickle
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
import torch.distributed as dist

from rootcause_engine.straggler import worker
from rootcause_engine.straggler.actions import EXCLUDE_RESTART_EXIT_CODE
from rootcause_engine.straggler.measure import TrialRunner
from rootcause_engine.straggler.report import NodeResult, StragglerReport
from rootcause_engine.straggler.settings import StragglerCheck, Workload
from rootcause_engine.straggler.worker import StragglerCheckHook, run_straggler_check_in_worker

if TYPE_CHECKING:
    from torch.distributed import TCPStore

TINY = Workload(matmul_size=8, matmuls_per_trial=1, allreduce_numel=4, allreduces_per_trial=1, trials=1)


class Detected(Exception):
    """The front-end's non-retryable error in these tests."""


@dataclass
class FrontEnd:
    """Records what rank 0 publishes; its error carries the report and the reason."""

    published: list[StragglerReport] = field(default_factory=list)
    refuse_to_publish: bool = False

    def publish(self, report: StragglerReport) -> None:
        if self.refuse_to_publish:
            raise OSError("deck storage is read-only")
        self.published.append(report)

    def detected_error(self, report: StragglerReport, reason: str) -> BaseException:
        return Detected(report.summary(), reason)


def four_nodes(*flagged: int, action: str) -> StragglerReport:
    nodes = [NodeResult(n, f"pod-{n}", f"host-{n}", 1, verdict="ok", hosts_rendezvous=n == 3) for n in range(4)]
    for n in flagged:
        nodes[n].verdict = "slow-compute"
    return StragglerReport(nodes=nodes, threshold=1.3, network_threshold=2.0, rounds=2, action=action)


@pytest.fixture
def job_env(store_server: TCPStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The only worker of a one-node job as torch elastic starts it, on the agent's store; first attempt."""
    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("GROUP_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(store_server.port)),
                        ("TORCHELASTIC_USE_AGENT_STORE", "True"), ("TORCHELASTIC_RESTART_COUNT", "0"),
                        ("TORCHELASTIC_MAX_RESTARTS", "1"), ("PET_NNODES", "2:4")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PET_RDZV_ENDPOINT", raising=False)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[StragglerReport]:
    """Makes the check return the report the test appends (the given verdicts instead of a measurement)."""
    reports: list[StragglerReport] = []

    def given_report(check: StragglerCheck, runner: TrialRunner) -> StragglerReport:
        return reports[0]

    monkeypatch.setattr(worker, "run_check", given_report)
    return reports


def test_a_one_node_check_runs_for_real_is_published_and_logged_and_training_goes_on(
    job_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    front_end = FrontEnd()
    with caplog.at_level(logging.INFO, logger=worker.logger.name):
        report = run_straggler_check_in_worker(StragglerCheck(action="fail", workload=TINY, timeout_s=30), front_end)
    assert report.skipped == "1 node(s), the check needs at least min_nodes=2"
    assert front_end.published == [report]
    (record,) = [r for r in caplog.records if r.name == worker.logger.name]
    assert record.levelno == logging.INFO and record.getMessage() == report.table()
    assert not dist.is_initialized()


def test_a_page_that_cannot_be_published_never_stops_the_check(
    job_env: None, checked: list[StragglerReport], caplog: pytest.LogCaptureFixture
) -> None:
    checked.append(four_nodes(action="warn"))
    with caplog.at_level(logging.INFO, logger=worker.logger.name):
        report = run_straggler_check_in_worker(StragglerCheck(), FrontEnd(refuse_to_publish=True))
    assert report is checked[0]
    assert "could not publish the straggler report" in caplog.text and "deck storage is read-only" in caplog.text


def test_only_rank_0_publishes(job_env: None, checked: list[StragglerReport], monkeypatch: pytest.MonkeyPatch) -> None:
    checked.append(four_nodes(action="warn"))
    monkeypatch.setenv("RANK", "1")
    front_end = FrontEnd()
    run_straggler_check_in_worker(StragglerCheck(), front_end)
    assert front_end.published == []


def test_warn_logs_the_flagged_nodes_and_returns(
    job_env: None, checked: list[StragglerReport], caplog: pytest.LogCaptureFixture
) -> None:
    checked.append(four_nodes(1, action="warn"))
    with caplog.at_level(logging.INFO, logger=worker.logger.name):
        assert run_straggler_check_in_worker(StragglerCheck(), FrontEnd()) is checked[0]
    levels = [r.levelno for r in caplog.records if r.name == worker.logger.name]
    assert levels == [logging.WARNING, logging.WARNING]  # the table (nodes flagged), then the decision
    assert caplog.records[-1].getMessage() == f"{checked[0].summary()}; training goes on (action=warn)"


def test_fail_raises_the_front_end_s_error_on_every_rank(
    job_env: None, checked: list[StragglerReport], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked.append(four_nodes(2, action="fail"))
    for rank in ("0", "3"):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(Detected) as raised:
            run_straggler_check_in_worker(StragglerCheck(action="fail"), FrontEnd())
        assert raised.value.args == (checked[0].summary(), "")


def test_exclude_restarts_a_healthy_node_with_the_try_again_exit_code(
    job_env: None, checked: list[StragglerReport], caplog: pytest.LogCaptureFixture
) -> None:
    checked.append(four_nodes(2, action="exclude"))
    with caplog.at_level(logging.INFO, logger=worker.logger.name), pytest.raises(SystemExit) as exited:
        run_straggler_check_in_worker(StragglerCheck(action="exclude"), FrontEnd())
    assert exited.value.code == EXCLUDE_RESTART_EXIT_CODE == 75
    assert caplog.records[-1].getMessage().endswith("; re-forming the job with the 3 healthy node(s) (exit code 75)")


def test_an_excluded_node_s_other_workers_wait_for_the_teardown_then_exit(
    job_env: None, checked: list[StragglerReport], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local rank 1 of the flagged node: it leaves the agent's SIGTERM to local rank 0, waits, then exits."""
    checked.append(four_nodes(2, action="exclude"))
    monkeypatch.setenv("GROUP_RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(worker, "LEAVE_GRACE_S", 0.0)
    with pytest.raises(SystemExit) as exited:
        run_straggler_check_in_worker(StragglerCheck(action="exclude"), FrontEnd())
    assert exited.value.code == EXCLUDE_RESTART_EXIT_CODE


def test_exclude_on_a_later_attempt_only_warns(
    job_env: None, checked: list[StragglerReport], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    checked.append(four_nodes(2, action="exclude"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    with caplog.at_level(logging.INFO, logger=worker.logger.name):
        assert run_straggler_check_in_worker(StragglerCheck(action="exclude"), FrontEnd()) is checked[0]
    assert caplog.records[-1].getMessage().endswith(
        "training goes on (action=exclude, attempt 2: nodes are excluded on the first attempt only)"
    )


def test_the_task_s_nnodes_wins_over_pet_nnodes(
    job_env: None, checked: list[StragglerReport], monkeypatch: pytest.MonkeyPatch
) -> None:
    checked.append(four_nodes(1, 2, action="exclude"))
    monkeypatch.setenv("PET_NNODES", "1:4")  # would let two of four leave
    with pytest.raises(Detected) as raised:
        run_straggler_check_in_worker(StragglerCheck(action="exclude"), FrontEnd(), nnodes="3:4")
    assert raised.value.args[1] == "excluding 2 node(s) would leave 2, fewer than the minimum 3"


def test_the_hook_is_picklable_and_runs_the_check_with_its_settings(
    job_env: None, checked: list[StragglerReport]
) -> None:
    checked.append(four_nodes(1, 2, action="exclude"))
    hook = StragglerCheckHook(StragglerCheck(action="exclude"), FrontEnd(), nnodes="3:4")
    copy = pickle.loads(pickle.dumps(hook))
    assert copy == hook
    with pytest.raises(Detected, match="fewer than the minimum 3"):
        copy()


def test_a_worker_without_logging_gets_a_handler_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.logger, "handlers", [])
    monkeypatch.setattr(worker.logger, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    worker._ensure_log_handler()
    assert worker.logger.level == logging.INFO
    (handler,) = worker.logger.handlers
    assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr


def test_a_worker_with_root_logging_keeps_it_and_only_gets_info_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.logger, "handlers", [])
    monkeypatch.setattr(worker.logger, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    worker._ensure_log_handler()
    assert worker.logger.level == logging.INFO and worker.logger.handlers == []
    monkeypatch.setattr(worker.logger, "level", logging.ERROR)  # set by the user: kept
    worker._ensure_log_handler()
    assert worker.logger.level == logging.ERROR
