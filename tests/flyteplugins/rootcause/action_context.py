"""This process as a process of a Flyte 2 action (a worker or ``a0``): the task context the plugin's
tests run under, with the action's own report and its outputs under a folder of the test's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import flyte.report
from flyte._context import internal_ctx
from flyte.models import ActionID, RawDataPath, TaskContext

#: The run the action belongs to.
RUN_NAME = "run-7"


@contextlib.contextmanager
def process_of_the_action(output_path: Path, mode: str = "remote") -> Iterator[flyte.report.Report]:
    """This process in the action ``a0`` of run :data:`RUN_NAME`, its outputs under ``output_path``; yields
    its copy of the report."""
    report = flyte.report.Report("a0")
    tctx = TaskContext(action=ActionID(name="a0", run_name=RUN_NAME), version="v", report=report,
                       raw_data_path=RawDataPath(path=str(output_path)), output_path=str(output_path),
                       run_base_dir=str(output_path), mode=mode)  # type: ignore[arg-type]
    with internal_ctx().replace_task_context(tctx):
        yield report
