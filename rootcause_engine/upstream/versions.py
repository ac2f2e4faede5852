"""Which upstream versions the patches were verified against, and the check that refuses the others.

The patches rely on internals (private methods, module globals, attributes set in constructors)
that upstream may rename or drop in any release without notice. Failing with a message that names
the package, its version, the supported range and the missing symbol beats a patch that silently
stops applying: on the failure path that turns into a stalled agent or a wrong root cause.

The check is lazy: each seam module calls :func:`require` with its own symbols at the first use
of a patch (never at ``import flytekit``, which imports this plugin through its entry point and
must stay cheap), and the result is remembered for the process. Versions are read from the
installed distributions' metadata, which does not import the package.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import re
import threading
import types
from collections.abc import Iterable
from typing import Any

#: Set to ``1`` to run with an upstream version outside the supported range (at your own risk: the
#: symbols are still checked, their behaviour is not).
ALLOW_UNSUPPORTED_VARIABLE = "ROOTCAUSE_ALLOW_UNSUPPORTED_UPSTREAM"


class UnsupportedUpstreamError(RuntimeError):
    """An upstream package's version or internals are not what this plugin's patches were written for."""


@dataclasses.dataclass(frozen=True)
class SupportedRange:
    """``minimum <= release < below``, compared on the numeric release only (``2.13.0+cpu`` is 2.13.0)."""

    minimum: tuple[int, ...]
    below: tuple[int, ...]

    def __contains__(self, version: str) -> bool:
        release = release_of(version)
        return release is not None and self.minimum <= release < self.below

    def __str__(self) -> str:
        return f">={'.'.join(map(str, self.minimum))},<{'.'.join(map(str, self.below))}"


#: Verified here: every symbol of every seam module exists in these versions and the integration
#: tests pass. torch: 2.13.0, the version the patches were written against (the Makefile and the
#: Dockerfile pin it). flytekit and kfpytorch: 1.16.31, and the symbols also checked in 1.16.0.
SUPPORTED: dict[str, SupportedRange] = {
    "torch": SupportedRange((2, 13), (2, 14)),
    "flytekit": SupportedRange((1, 16), (1, 17)),
    "flytekitplugins-kfpytorch": SupportedRange((1, 16), (1, 17)),
    # Flyte 2's front-end (flyteplugins.rootcause): 2.12.1, the version its seam was written against
    "flyte": SupportedRange((2, 12), (2, 13)),
    "flyteplugins-pytorch": SupportedRange((2, 12), (2, 13)),
}


@dataclasses.dataclass(frozen=True)
class Symbol:
    """One upstream name a seam module patches or reads.

    ``path`` is dotted from ``module`` (``"LocalElasticAgent._rendezvous"``). With
    ``instance_attribute`` the last part is an attribute the class's constructor sets, which the
    class itself does not have: it is checked by name in the constructors' code (``co_names``), a
    cheap look that needs no process started (the smoke tests build real objects).
    """

    distribution: str
    module: str
    path: str
    why: str
    instance_attribute: bool = False

    @property
    def qualified_name(self) -> str:
        return f"{self.module}.{self.path}"


_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_lock = threading.Lock()
_checked_distributions: set[str] = set()
_checked_symbols: set[Symbol] = set()


def release_of(version: str) -> tuple[int, ...] | None:
    """The numeric release of a version string (``"2.13.0+cpu"`` -> ``(2, 13, 0)``), ``None`` if it has none."""
    match = _RELEASE.match(version.strip().removeprefix("v"))
    return tuple(int(part) for part in match.group().split(".")) if match else None


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` from its metadata; ``None`` if it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _advice(distribution: str) -> str:
    return f"install {distribution}{SUPPORTED[distribution]} (pip install '{distribution}{SUPPORTED[distribution]}')"


def check_version(distribution: str) -> None:
    """Raise :class:`UnsupportedUpstreamError` unless ``distribution``'s installed version is supported."""
    supported = SUPPORTED[distribution]
    version = installed_version(distribution)
    if version is not None and version in supported:
        return
    if os.environ.get(ALLOW_UNSUPPORTED_VARIABLE) == "1":
        return
    found = "is not installed" if version is None else f"{version} is installed"
    raise UnsupportedUpstreamError(
        f"flytekitplugins-rootcause patches internals of {distribution} and supports {distribution}{supported} "
        f"only, but {distribution} {found}. To fix it, {_advice(distribution)}; or set "
        f"{ALLOW_UNSUPPORTED_VARIABLE}=1 to run with this version anyway (untested: a failure may be reported "
        f"wrongly or not at all)."
    )


def _constructors_mention(owner: type, name: str) -> bool:
    """Whether the ``__init__`` of ``owner`` or of a base class names attribute ``name`` (sets it, normally)."""
    for cls in owner.__mro__:
        init = vars(cls).get("__init__")
        if isinstance(init, types.FunctionType) and name in init.__code__.co_names:
            return True
    return False


def _resolve(symbol: Symbol) -> bool:
    """Whether ``symbol`` exists in the installed package (importing its module if need be)."""
    try:
        value: Any = importlib.import_module(symbol.module)
    except ImportError:
        return False
    *owners, last = symbol.path.split(".")
    for part in owners:
        if not hasattr(value, part):
            return False
        value = getattr(value, part)
    if symbol.instance_attribute:
        return isinstance(value, type) and (hasattr(value, last) or _constructors_mention(value, last))
    return hasattr(value, last)


def check_symbol(symbol: Symbol) -> None:
    """Raise :class:`UnsupportedUpstreamError` naming ``symbol`` if the installed package lacks it."""
    if _resolve(symbol):
        return
    distribution = symbol.distribution
    version = installed_version(distribution) or "(not installed)"
    raise UnsupportedUpstreamError(
        f"flytekitplugins-rootcause cannot run with {distribution} {version} (supported: "
        f"{distribution}{SUPPORTED[distribution]}): it has no {symbol.qualified_name}, which the plugin "
        f"{symbol.why}. To fix it, {_advice(distribution)}."
    )


def require(symbols: Iterable[Symbol]) -> None:
    """Check the versions of the symbols' packages, then the symbols; each once per process.

    Called by the seam at the first use of a patch, before anything is patched, so that an
    unsupported upstream fails there, clearly, and not in the middle of a failing launch.
    """
    pending = [symbol for symbol in symbols if symbol not in _checked_symbols]
    if not pending:
        return
    with _lock:
        for distribution in dict.fromkeys(symbol.distribution for symbol in pending):
            if distribution not in _checked_distributions:
                check_version(distribution)
                _checked_distributions.add(distribution)
        for symbol in pending:
            check_symbol(symbol)
            _checked_symbols.add(symbol)


def forget_checks() -> None:
    """Forget what :func:`require` checked (for tests that simulate another upstream)."""
    with _lock:
        _checked_distributions.clear()
        _checked_symbols.clear()
