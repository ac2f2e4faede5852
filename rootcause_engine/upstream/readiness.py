"""Whether the root-cause diagnosis can run here: the one verdict both flavours act on. The plugin must
never fail a training that plain ``Elastic`` would run. So each flavour asks :func:`check` once, up
front, about every symbol its seams use. An unverified version only warns. A missing internal, or a
patch that raises, turns the diagnosis off, and the task runs upstream's own path. Nothing here
imports torch, so the flytekit entrypoint can check its own seam cheaply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import importlib
import logging
import warnings
from collections.abc import Iterable
from typing import Any

from rootcause_engine.upstream.say_once import SayOnce
from rootcause_engine.upstream.versions import Symbol, symbol_problem, version_warning

logger = logging.getLogger(__name__)

#: How the "off" line reads; the reason goes in the middle.
OFF_TEMPLATE = "root-cause diagnosis is off: {reason}; running as upstream Elastic"

#: The engine's seam modules every launch uses, and the one only ``restart_policy="soft"`` uses.
_ENGINE_SEAMS = ("torch_elastic", "torch_worker", "torch_logging")
_SOFT_RESTART_SEAM = "torch_agent_loop"


class RootCauseUpstreamWarning(UserWarning):
    """An upstream version is outside the verified range, or lacks an internal the diagnosis needs."""


@dataclasses.dataclass(frozen=True)
class Readiness:
    """The verdict: the diagnosis on and verified (:attr:`ok`), on but not verified here
    (:attr:`not_verified` says on what), or off (:attr:`off_reason` says why)."""

    not_verified: tuple[str, ...] = ()
    off_reason: str | None = None

    @property
    def diagnosis_on(self) -> bool:
        return self.off_reason is None

    @property
    def ok(self) -> bool:
        return self.diagnosis_on and not self.not_verified

    @property
    def lines(self) -> tuple[str, ...]:
        """What the user is told, one line each (the log, the report or Deck, the error message)."""
        off = () if self.off_reason is None else (OFF_TEMPLATE.format(reason=self.off_reason),)
        return (*self.not_verified, *off)

    @property
    def note(self) -> str:
        """:attr:`lines` as one paragraph (empty when :attr:`ok`)."""
        return "\n".join(self.lines)

    @property
    def page(self) -> str:
        """:attr:`lines` as an HTML list, for the Deck or the report tab (empty when :attr:`ok`)."""
        if not self.lines:
            return ""
        return "".join(("<ul>", *(f"<li>{html.escape(line)}</li>" for line in self.lines), "</ul>"))

    def turned_off(self, reason: str) -> Readiness:
        """This verdict with the diagnosis off for ``reason`` (a patch that raised while applied)."""
        return dataclasses.replace(self, off_reason=reason)

    def announce(self, *, warn: bool = False) -> None:
        """Log each line (``logging.warning``) and, with ``warn``, ``warnings.warn`` it, once per
        process: the same verdict is reached at the definition and again in the launch."""
        for line in self.lines:
            if not _announced.first(line):
                continue
            logger.warning("%s", line)
            if warn:
                warnings.warn(line, RootCauseUpstreamWarning, stacklevel=3)


_announced = SayOnce()


def forget_announcements() -> None:
    """Announce every line again (for tests)."""
    _announced.forget()


def check(seams: Iterable[str]) -> Readiness:
    """The verdict for a task that uses the seam modules ``seams`` (each declares its ``SYMBOLS``):
    a warning per distribution of theirs outside its verified range, and off at the first missing
    symbol, or at a seam module that cannot even be imported (upstream moved a name it imports)."""
    symbols: list[Symbol] = []
    for seam in seams:
        try:
            symbols.extend(importlib.import_module(seam).SYMBOLS)
        except ImportError as error:
            return Readiness(off_reason=f"{seam} cannot be imported ({error})")
    distributions = dict.fromkeys(symbol.distribution for symbol in symbols)
    not_verified = tuple(line for line in map(version_warning, distributions) if line is not None)
    missing = next((problem for problem in map(symbol_problem, symbols) if problem is not None), None)
    return Readiness(not_verified=not_verified, off_reason=missing)


def engine_seams(restart_policy: str = "hard") -> tuple[str, ...]:
    """The engine's torch seam modules a launch uses (the soft-restart loop's only under ``"soft"``).

    Checking them imports torch's agent modules: only where a launch or a task definition loads
    them anyway.
    """
    seams = (*_ENGINE_SEAMS, *((_SOFT_RESTART_SEAM,) if restart_policy == "soft" else ()))
    return tuple(f"{__package__}.{seam}" for seam in seams)


class PatchesNotApplied(Exception):
    """Applying a launch's patches or observers raised (``reason`` says what): the caller runs
    upstream's path instead, since applying a patch must never fail the training."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def enter_all(
    stack: contextlib.ExitStack,
    contexts: Iterable[contextlib.AbstractContextManager[Any]],
    passthrough: tuple[type[BaseException], ...] = (),
) -> None:
    """Enter ``contexts`` (the patches and observers of a launch) on ``stack``, in order.

    If one raises, whatever was entered is undone (``stack`` closed) and :class:`PatchesNotApplied`
    is raised with the reason. An exception of a ``passthrough`` type is the pod's own news, not a
    broken patch (torch's ``SignalException`` when the kubelet stopped the pod before its launch):
    it propagates as it is, to be diagnosed. Only entering is guarded: what runs inside the block
    (the training) raises as it does without the plugin.
    """
    try:
        for context in contexts:
            stack.enter_context(context)
    except passthrough:
        stack.close()
        raise
    except Exception as error:
        logger.warning("applying the root-cause patches failed", exc_info=True)
        stack.close()
        raise PatchesNotApplied(f"applying a patch raised {type(error).__name__}: {error}") from error
