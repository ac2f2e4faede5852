"""The one verdict each flavour acts on (``rootcause_engine.upstream.readiness``): on and verified, on
with a warning (a version outside the verified range), or off (a missing internal, a patch that
raised while applied); and the flytekit flavour's warning where the task is defined (Flyte 2's:
``tests/flyteplugins/rootcause/test_task_versions.py``; the pods' own check in real jobs:
``tests/scenarios/test_fail_open_jobs.py``)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import flytekit.bin.entrypoint
import pytest

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.upstream import entrypoint_readiness, task_readiness
from rootcause_engine.upstream import readiness, versions
from rootcause_engine.upstream.readiness import (
    PatchesNotApplied,
    Readiness,
    RootCauseUpstreamWarning,
    check,
    enter_all,
)
from rootcause_engine.upstream.versions import Symbol
from rootcause_harness.faults import upstream_skew_env

TORCH_RANGE = versions.VERIFIED["torch"]

FAKE_SEAM = "tests_fake_seam"


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    versions.forget_checks()
    readiness.forget_announcements()
    yield
    versions.forget_checks()
    readiness.forget_announcements()


def _seam(monkeypatch: pytest.MonkeyPatch, *symbols: Symbol) -> str:
    module = types.ModuleType(FAKE_SEAM)
    module.SYMBOLS = symbols  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, FAKE_SEAM, module)
    return FAKE_SEAM


def _torch_at(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda name: version if name == "torch" else real(name))


def test_the_verdict_says_on_verified_not_verified_or_off() -> None:
    assert Readiness().ok and Readiness().diagnosis_on and Readiness().lines == () and Readiness().page == ""
    line = f"root-cause diagnosis not verified on torch 2.99.0 (verified: torch{TORCH_RANGE})"
    warned = Readiness(not_verified=(line,))
    assert warned.diagnosis_on and not warned.ok and warned.note == warned.not_verified[0]
    off = warned.turned_off("applying a patch raised TypeError: <frozen>")
    assert not off.diagnosis_on
    assert off.lines == (*warned.not_verified,
                         "root-cause diagnosis is off: applying a patch raised TypeError: <frozen>; running as "
                         "upstream Elastic")
    assert "&lt;frozen&gt;" in off.page and "<frozen>" not in off.page  # escaped for the Deck and the report


def test_check_warns_for_a_version_outside_and_turns_off_at_a_missing_symbol(monkeypatch: pytest.MonkeyPatch) -> None:
    present = Symbol("torch", "torch.multiprocessing.spawn", "ProcessContext.join", "wraps")
    missing = Symbol("torch", "torch.multiprocessing.spawn", "ProcessContext.no_such_method", "calls, to test")
    assert check([_seam(monkeypatch, present)]).ok
    _torch_at(monkeypatch, "2.7.0")  # older than verified warns too
    verdict = check([_seam(monkeypatch, present, missing)])
    assert verdict.not_verified == (
        f"root-cause diagnosis not verified on torch 2.7.0 (verified: torch{TORCH_RANGE})",)
    assert verdict.off_reason == ("torch 2.7.0 has no torch.multiprocessing.spawn.ProcessContext.no_such_method, "
                                  "which the plugin calls, to test")


def test_a_seam_that_cannot_be_imported_turns_the_diagnosis_off() -> None:
    verdict = check(["tests_no_such_seam_module"])
    assert not verdict.diagnosis_on and "tests_no_such_seam_module cannot be imported" in str(verdict.off_reason)


def test_each_flavour_checks_every_seam_it_uses_on_the_installed_upstream() -> None:
    assert task_readiness("hard").ok and task_readiness("soft").ok and entrypoint_readiness().ok


def test_a_line_is_announced_once_per_process(caplog: pytest.LogCaptureFixture) -> None:
    verdict = Readiness(off_reason="torch 2.13.0 has no x")
    with caplog.at_level(logging.WARNING), pytest.warns(RootCauseUpstreamWarning):
        verdict.announce(warn=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RootCauseUpstreamWarning)
        verdict.announce(warn=True)
    assert [record.getMessage() for record in caplog.records] == [verdict.lines[0]]


def test_applying_stops_at_the_context_that_raises_and_undoes_the_others() -> None:
    entered: list[str] = []

    @contextlib.contextmanager
    def observer(name: str) -> Iterator[None]:
        entered.append(name)
        try:
            yield
        finally:
            entered.remove(name)

    @contextlib.contextmanager
    def raising() -> Iterator[None]:
        raise AttributeError("no _rendezvous here")
        yield

    with contextlib.ExitStack() as stack:
        enter_all(stack, (observer("a"), observer("b")))
        assert entered == ["a", "b"]
    assert entered == []
    with contextlib.ExitStack() as stack, pytest.raises(PatchesNotApplied) as failed:
        enter_all(stack, (observer("a"), raising(), observer("c")))
    assert failed.value.reason == "applying a patch raised AttributeError: no _rendezvous here"
    assert entered == []  # what was applied is undone, the rest never applied


def test_the_pod_s_own_news_while_applying_is_not_a_broken_patch() -> None:
    """A SIGTERM noted before the launch raises while the observers are entered: it propagates, to be
    diagnosed as the pod's stop, and what was entered is undone."""

    class Stopped(Exception):
        pass

    @contextlib.contextmanager
    def applied() -> Iterator[None]:
        entered.append("applied")
        try:
            yield
        finally:
            entered.remove("applied")

    @contextlib.contextmanager
    def stopped() -> Iterator[None]:
        raise Stopped("Process 1 got signal: 15")
        yield

    entered: list[str] = []
    with contextlib.ExitStack() as stack, pytest.raises(Stopped):
        enter_all(stack, (applied(), stopped()), passthrough=(Stopped,))
    assert entered == []


def test_a_flytekit_task_defined_on_a_newer_torch_warns_and_is_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    _torch_at(monkeypatch, "2.99.0")
    with pytest.warns(RootCauseUpstreamWarning) as warned:
        config = ElasticRootCause(nnodes=2, nproc_per_node=1)
    assert [str(warning.message) for warning in warned] == [
        f"root-cause diagnosis not verified on torch 2.99.0 (verified: torch{TORCH_RANGE})"]
    assert config.nnodes == 2


def test_a_flytekit_task_defined_without_an_internal_warns_that_the_diagnosis_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(flytekit.bin.entrypoint, "get_one_of")
    with pytest.warns(RootCauseUpstreamWarning) as warned:
        ElasticRootCause(nnodes=2, nproc_per_node=1)
    (message,) = [str(warning.message) for warning in warned]
    assert message.startswith("root-cause diagnosis is off: flytekit ")
    assert "flytekit.bin.entrypoint.get_one_of" in message
    assert message.endswith("; running as upstream Elastic")


def test_the_entrypoint_without_its_flytekit_hooks_is_flytekit_s_own(tmp_path: Path) -> None:
    """In a process whose flytekit lacks a helper the entrypoint swaps, ``pyflyte-rootcause-execute``
    is flytekit's ``pyflyte-execute`` (its own command, help included), and says why."""
    env = os.environ | upstream_skew_env(tmp_path, removed=("flytekit.bin.entrypoint.get_traceback_str",),
                                         pythonpath=os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "flytekitplugins_rootcause.entrypoint", "--help"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "writing one error document per worker" not in done.stdout, done.stdout  # not ours
    assert "--resolver" in done.stdout  # flytekit's command
    assert "root-cause diagnosis is off: flytekit " in done.stderr and "get_traceback_str" in done.stderr, done.stderr
