"""Which upstream versions the patches were verified against, and the symbol check. The patches rely
on internals that upstream may rename or drop in any release. Refusing an unverified version would
fail a training that plain ``Elastic`` runs, so it only warns. A missing symbol is what breaks a
patch, so :func:`require` names it before anything is patched. The check is lazy and remembered, so
``import flytekit`` stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import re
import types
from collections.abc import Iterable
from typing import Any


class UnsupportedUpstreamError(RuntimeError):
    """An upstream package lacks an internal this plugin's patches use."""


@dataclasses.dataclass(frozen=True)
class VerifiedRange:
    """``minimum <= release < below``, compared on the numeric release only (``2.13.0+cpu`` is 2.13.0)."""

    minimum: tuple[int, ...]
    below: tuple[int, ...]

    def __contains__(self, version: str) -> bool:
        release = release_of(version)
        return release is not None and self.minimum <= release < self.below

    def __str__(self) -> str:
        return f">={'.'.join(map(str, self.minimum))},<{'.'.join(map(str, self.below))}"


#: The ranges the patches are verified on: outside them the plugin runs and warns. The lead fills in
#: which versions of each range the compat lane ran (docs/upstream.md) and may narrow one here, the
#: one place these ranges live.
VERIFIED: dict[str, VerifiedRange] = {
    "torch": VerifiedRange((2, 8), (2, 16)),
    "flytekit": VerifiedRange((1, 14), (1, 17)),
    "flytekitplugins-kfpytorch": VerifiedRange((1, 14), (1, 17)),
    # Flyte 2's front-end (flyteplugins.rootcause)
    "flyte": VerifiedRange((2, 10), (2, 13)),
    "flyteplugins-pytorch": VerifiedRange((2, 10), (2, 13)),
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


def version_warning(distribution: str) -> str | None:
    """The warning for ``distribution``'s installed version outside its verified range (older or newer);
    ``None`` within it, or when it is not installed (its symbols then say what is missing)."""
    verified = VERIFIED[distribution]
    version = installed_version(distribution)
    if version is None or version in verified:
        return None
    return f"root-cause diagnosis not verified on {distribution} {version} (verified: {distribution}{verified})"


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


def symbol_problem(symbol: Symbol) -> str | None:
    """What is wrong with ``symbol`` in the installed package (``None``: it is there)."""
    if _resolve(symbol):
        return None
    version = installed_version(symbol.distribution) or "(not installed)"
    return f"{symbol.distribution} {version} has no {symbol.qualified_name}, which the plugin {symbol.why}"


def check_symbol(symbol: Symbol) -> None:
    """Raise :class:`UnsupportedUpstreamError` naming ``symbol`` if the installed package lacks it."""
    problem = symbol_problem(symbol)
    if problem is not None:
        raise UnsupportedUpstreamError(f"the root-cause plugin cannot run: {problem}.")


def require(symbols: Iterable[Symbol]) -> None:
    """Check the symbols, each once per process (or once per racing thread: see the module's note).

    Called by the seam at the first use of a patch, before anything is patched, so that a missing
    internal fails there, clearly, and not in the middle of a failing launch. The front-ends check
    every symbol up front (:mod:`.readiness`) and run as upstream where one is missing, so in a task
    this raises only for an upstream that changed while the process ran.
    """
    for symbol in symbols:
        if symbol not in _checked_symbols:
            check_symbol(symbol)
            _checked_symbols.add(symbol)


def forget_checks() -> None:
    """Forget what :func:`require` checked (for tests that simulate another upstream)."""
    _checked_symbols.clear()
