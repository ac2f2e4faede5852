"""The version and symbol checks of ``rootcause_engine/upstream/versions.py``: verified, unverified and
missing decisions on given version strings, and symbols looked up in a throwaway module."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from rootcause_engine.upstream import versions
from rootcause_engine.upstream.versions import (
    Symbol,
    UnsupportedUpstreamError,
    VerifiedRange,
    check_symbol,
    forget_checks,
    installed_version,
    release_of,
    require,
    symbol_problem,
    version_warning,
)

#: The throwaway module the symbols below are looked up in.
MODULE = "rootcause_throwaway_upstream"


class _Base:
    def __init__(self) -> None:
        self.from_base = 1


class _Child(_Base):
    declared = "on the class"

    def __init__(self) -> None:
        super().__init__()
        self.from_child = 2

    def method(self) -> None:
        """A method the seam would wrap."""


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A module importable as ``MODULE`` holding ``_Child``, with the checks forgotten before and after."""
    module = types.ModuleType(MODULE)
    module.Child = _Child  # type: ignore[attr-defined]
    module.flag = True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, MODULE, module)
    forget_checks()
    yield module
    forget_checks()


def symbol(path: str, *, instance_attribute: bool = False, distribution: str = "pytest") -> Symbol:
    return Symbol(distribution, MODULE, path, "reads, for the test", instance_attribute)


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("v2.13.1", (2, 13, 1)),
        ("  2.9  ", (2, 9)),
        ("2.16.0.dev20250101+cu128", (2, 16, 0)),
        ("", None),
        ("dev", None),
    ],
)
def test_release_of_reads_the_leading_numeric_release(version: str, release: tuple[int, ...] | None) -> None:
    assert release_of(version) == release


@pytest.mark.parametrize(
    ("version", "verified"),
    [
        ("2.8", True),  # the minimum itself
        ("2.8.0+cpu", True),
        ("2.15.99", True),
        ("2.16.0", False),  # "below" is excluded
        ("2.16.0rc1", False),
        ("2.7.9", False),
        ("nightly", False),
    ],
)
def test_the_torch_range_includes_its_minimum_and_excludes_its_bound(version: str, verified: bool) -> None:
    assert (version in VerifiedRange((2, 8), (2, 16))) is verified


@pytest.mark.parametrize(
    ("installed", "warning"),
    [
        ("1.15.3", None),
        ("1.17.0", "root-cause diagnosis not verified on flytekit 1.17.0 (verified: flytekit>=1.14,<1.17)"),
        ("1.13.9", "root-cause diagnosis not verified on flytekit 1.13.9 (verified: flytekit>=1.14,<1.17)"),
        ("unknown", "root-cause diagnosis not verified on flytekit unknown (verified: flytekit>=1.14,<1.17)"),
        (None, None),  # not installed: its symbols say what is missing, not the version
    ],
)
def test_version_warning_decides_on_the_installed_version(
    monkeypatch: pytest.MonkeyPatch, installed: str | None, warning: str | None
) -> None:
    monkeypatch.setitem(versions.VERIFIED, "flytekit", VerifiedRange((1, 14), (1, 17)))
    monkeypatch.setattr(versions, "installed_version", lambda name: installed)
    assert version_warning("flytekit") == warning


def test_version_warning_refuses_a_distribution_without_a_verified_range() -> None:
    with pytest.raises(KeyError, match="not-a-verified-package"):
        version_warning("not-a-verified-package")


def test_installed_version_reads_the_metadata_and_none_for_a_missing_distribution() -> None:
    assert installed_version("pytest") == pytest.__version__
    assert installed_version("rootcause-no-such-distribution") is None


def test_symbols_present_in_the_module_have_no_problem(upstream: types.ModuleType) -> None:
    for present in (symbol("flag"), symbol("Child.method"), symbol("Child.declared")):
        assert symbol_problem(present) is None
        check_symbol(present)


def test_an_instance_attribute_is_found_in_the_constructor_of_the_class_or_a_base(
    upstream: types.ModuleType,
) -> None:
    assert symbol_problem(symbol("Child.from_child", instance_attribute=True)) is None
    assert symbol_problem(symbol("Child.from_base", instance_attribute=True)) is None
    # without the flag the same name is looked up on the class, where it is not
    assert symbol_problem(symbol("Child.from_child")) is not None
    assert symbol_problem(symbol("Child.never_set", instance_attribute=True)) is not None
    # the owner of an instance attribute must be a class
    assert symbol_problem(symbol("flag.anything", instance_attribute=True)) is not None


def test_a_missing_symbol_s_problem_names_the_distribution_version_name_and_use(upstream: types.ModuleType) -> None:
    assert symbol_problem(symbol("Child.gone")) == (
        f"pytest {pytest.__version__} has no {MODULE}.Child.gone, which the plugin reads, for the test"
    )
    assert symbol_problem(symbol("flag", distribution="rootcause-no-such-distribution")) is None
    missing = Symbol("rootcause-no-such-distribution", "rootcause_no_such_module", "x", "calls")
    assert symbol_problem(missing) == (
        "rootcause-no-such-distribution (not installed) has no rootcause_no_such_module.x, which the plugin calls"
    )


def test_check_symbol_raises_the_clear_error(upstream: types.ModuleType) -> None:
    with pytest.raises(UnsupportedUpstreamError) as raised:
        check_symbol(symbol("Child.gone"))
    assert str(raised.value).startswith("the root-cause plugin cannot run: pytest ")
    assert str(raised.value).endswith(f"{MODULE}.Child.gone, which the plugin reads, for the test.")


def test_require_remembers_a_passed_check_until_it_is_forgotten(upstream: types.ModuleType) -> None:
    flag = symbol("flag")
    require([flag])
    del upstream.flag  # upstream changes while the process runs
    require([flag])  # checked once: not looked up again
    forget_checks()
    with pytest.raises(UnsupportedUpstreamError, match=rf"{MODULE}\.flag"):
        require([flag])


def test_require_stops_at_the_first_missing_symbol_and_remembers_only_those_before_it(
    upstream: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, missing, last = symbol("flag"), symbol("Child.gone"), symbol("Child.declared")
    with pytest.raises(UnsupportedUpstreamError, match=r"Child\.gone"):
        require([first, missing, last])
    del upstream.flag
    require([first])  # remembered
    with pytest.raises(UnsupportedUpstreamError, match=r"Child\.gone"):
        require([missing])  # a failed check is not remembered as passed
    monkeypatch.delattr(_Child, "declared")
    with pytest.raises(UnsupportedUpstreamError, match=r"Child\.declared"):
        require([last])  # never reached before, so checked now
