"""The compatibility lane: the plugin installed from its wheels on the oldest, a middle and the newest
of each upstream, a fault injected, judged at the training operator's decision.

Each cell's virtualenv (``testbed.compat``) holds one torch release, one flytekit line and one
Flyte 2 line, this checkout's wheels and nothing editable; the installed demos run a 2-pod x
2-worker job from a scratch folder and exit non-zero when the console at the decision does not
name the pod the fault hit. ``make compat`` runs this lane (``.ci/run`` after the suite); the other
cells of the matrix are measured by ``benchmarks/compat_matrix.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import compat

pytestmark = [pytest.mark.compat, pytest.mark.slow]

#: A worker killed (no error file: the death watcher's exact time), one that raises (its own
#: record), and a rank that hangs (the Flight Recorder and the hang watch: the most torch internals).
FAULTS = ("sigkill", "raise", "hang")


@pytest.fixture(scope="session")
def wheels() -> list[Path]:
    return compat.build_wheels()


@pytest.mark.timeout(compat.INSTALL_TIMEOUT_S + 600)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("flavour", sorted(compat.DEMOS))
@pytest.mark.parametrize("cell", compat.LANE, ids=lambda cell: cell.name)
def test_a_fault_is_named_right_at_the_operator_s_decision(
    cell: compat.Cell, flavour: str, fault: str, wheels: list[Path]
) -> None:
    python = compat.install_cell(cell, wheels)
    installed = compat.installed_versions(python)
    assert installed["torch"].split("+")[0] == cell.torch, installed
    assert installed["flytekit"].startswith(f"{cell.flytekit}."), installed
    assert installed["flyte"].startswith(f"{cell.flyte}."), installed

    run = compat.run_fault(cell, python, flavour, fault)

    assert run.right, f"{run.describe()}\n{run.output[-6000:]}"
    # inside the verified range: full diagnosis, no warning that it is off or unverified
    assert "diagnosis is off" not in run.output, run.output[-6000:]
    assert "not verified" not in run.output, run.output[-6000:]


@pytest.mark.timeout(compat.INSTALL_TIMEOUT_S + 900)
@pytest.mark.parametrize("cell", compat.LANE, ids=lambda cell: cell.name)
def test_every_seam_symbol_is_what_the_plugin_uses_it_as(cell: compat.Cell, wheels: list[Path]) -> None:
    done = compat.run_seam_tests(compat.install_cell(cell, wheels))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
