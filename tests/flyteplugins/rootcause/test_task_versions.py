"""An unverified or incomplete flyte or flyteplugins-pytorch is told where the task is defined
(``ElasticRootCause``, so ``flyte.TaskEnvironment(plugin_config=...)``), as a warning, never an
error: the task is defined and its pods train (simulated by patching the engine's version lookup,
as ``tests/test_upstream_seams.py`` does; the pods' own check runs in ``test_fail_open_jobs.py``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import flyte
import flyte._internal.runtime.io
import pytest

from flyteplugins.rootcause import ElasticRootCause, RootCauseTorchFunctionTask
from flyteplugins.rootcause.upstream import flyte_readiness
from rootcause_engine.upstream import readiness, versions
from rootcause_engine.upstream.readiness import RootCauseUpstreamWarning


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    """Each test checks and warns anew, and a simulated upstream never leaks into another test."""
    versions.forget_checks()
    readiness.forget_announcements()
    yield
    versions.forget_checks()
    readiness.forget_announcements()


def _installed(monkeypatch: pytest.MonkeyPatch, distribution: str, version: str | None) -> None:
    """``distribution`` looks installed at ``version`` (``None``: not installed), the others as they are."""
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda name: version if name == distribution else real(name))


def _define(name: str) -> RootCauseTorchFunctionTask:
    """A task definition as a user writes one."""
    env = flyte.TaskEnvironment(name=name, plugin_config=ElasticRootCause(nnodes=2, nproc_per_node=1))

    @env.task
    def train(epochs: int = 1) -> float:
        return float(epochs)

    assert isinstance(train, RootCauseTorchFunctionTask)
    return train


@pytest.mark.parametrize(
    ("distribution", "version"),
    [("flyteplugins-pytorch", "2.13.0"), ("flyte", "2.9.4"), ("torch", "2.99.0")],
    ids=["newer-plugin", "older-flyte", "newer-torch"],
)
def test_an_unverified_version_warns_at_the_definition_and_defines_the_task(
    monkeypatch: pytest.MonkeyPatch, distribution: str, version: str
) -> None:
    _installed(monkeypatch, distribution, version)
    with pytest.warns(RootCauseUpstreamWarning) as warned:
        _define("unverified_version")
    verified = versions.VERIFIED[distribution]
    expected = f"root-cause diagnosis not verified on {distribution} {version} (verified: {distribution}{verified})"
    assert [str(warning.message) for warning in warned] == [expected]
    assert flyte_readiness().diagnosis_on  # runs with the warning


def test_a_missing_internal_warns_at_the_definition_that_the_diagnosis_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(flyte._internal.runtime.io, "report_path")
    with pytest.warns(RootCauseUpstreamWarning) as warned:
        ElasticRootCause(nnodes=2, nproc_per_node=1)
    (message,) = [str(warning.message) for warning in warned]
    assert message == (
        f"root-cause diagnosis is off: flyte {versions.installed_version('flyte')} has no "
        "flyte._internal.runtime.io.report_path, which the plugin reads back to keep the report tabs that rank 0's "
        "workers flushed; running as upstream Elastic"
    )
    assert not flyte_readiness().diagnosis_on


def test_a_verified_upstream_defines_the_task_without_a_word(recwarn: pytest.WarningsRecorder) -> None:
    _define("verified")
    assert not [warning for warning in recwarn if issubclass(warning.category, RootCauseUpstreamWarning)]
    assert flyte_readiness().ok


def test_the_warning_is_given_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "flyte", "2.13.0")
    with pytest.warns(RootCauseUpstreamWarning):
        _define("warned")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RootCauseUpstreamWarning)
        _define("warned_again")  # the same line is not repeated
