"""An unsupported flyte or flyteplugins-pytorch is refused where the task is defined
(``ElasticRootCause``, so ``flyte.TaskEnvironment(plugin_config=...)``), in words naming this
distribution, ``flyteplugins-rootcause``, and the distribution at fault (simulated by patching the
engine's version lookup, as ``tests/upstream/test_seam.py`` does)."""

from __future__ import annotations

from collections.abc import Iterator

import flyte
import flyte._internal.runtime.io
import pytest

from flyteplugins.rootcause import ElasticRootCause, RootCauseTorchFunctionTask
from flyteplugins.rootcause.upstream import UnsupportedFlyteError
from rootcause_engine.upstream import versions
from rootcause_engine.upstream.versions import ALLOW_UNSUPPORTED_VARIABLE, UnsupportedUpstreamError

SUPPORTED = "flyteplugins-rootcause supports flyte>=2.12,<2.13 and flyteplugins-pytorch>=2.12,<2.13 only"


@pytest.fixture(autouse=True)
def _fresh_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test checks anew, and a simulated upstream never leaks into another test."""
    monkeypatch.delenv(ALLOW_UNSUPPORTED_VARIABLE, raising=False)
    versions.forget_checks()
    yield
    versions.forget_checks()


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
    ("distribution", "version", "found"),
    [
        ("flyteplugins-pytorch", "2.13.0", "flyteplugins-pytorch 2.13.0 is installed"),
        ("flyte", "2.11.4", "flyte 2.11.4 is installed"),
        ("flyte", None, "flyte is not installed"),
    ],
)
def test_an_unsupported_version_is_refused_at_the_definition_naming_both_distributions(
    monkeypatch: pytest.MonkeyPatch, distribution: str, version: str | None, found: str
) -> None:
    _installed(monkeypatch, distribution, version)
    with pytest.raises(UnsupportedFlyteError) as raised:
        _define("refused_version")
    message = str(raised.value)
    assert message.startswith(f"{SUPPORTED}, but {found}. "), message
    assert f"pip install '{distribution}>=2.12,<2.13'" in message and ALLOW_UNSUPPORTED_VARIABLE in message
    assert "flytekitplugins" not in message  # the flytekit plugin is not what the user installed
    assert isinstance(raised.value, UnsupportedUpstreamError)  # what the engine's checks raise


def test_a_missing_internal_is_refused_at_the_definition_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(flyte._internal.runtime.io, "report_path")
    with pytest.raises(UnsupportedFlyteError) as raised:
        ElasticRootCause(nnodes=2, nproc_per_node=1)
    message = str(raised.value)
    assert message.startswith(f"{SUPPORTED}, but flyte {versions.installed_version('flyte')} has no "
                              "flyte._internal.runtime.io.report_path, which the plugin reads back"), message
    assert message.endswith("To fix it, pip install 'flyte>=2.12,<2.13'.")


def test_a_supported_upstream_defines_the_task_and_is_checked_there(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    real = versions.installed_version
    monkeypatch.setattr(versions, "installed_version", lambda name: lookups.append(name) or real(name))
    _define("supported")
    assert sorted(lookups) == ["flyte", "flyteplugins-pytorch"]  # at the definition, once per process
    _define("supported_again")
    assert len(lookups) == 2


def test_the_override_variable_lets_an_unsupported_version_define_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, "flyteplugins-pytorch", "2.13.0")
    monkeypatch.setenv(ALLOW_UNSUPPORTED_VARIABLE, "1")
    _define("allowed")
