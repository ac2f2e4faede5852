"""The one way this plugin changes an attribute of an upstream object (module, class or instance). A
patch that is not put back exactly leaks into upstream's later behaviour. So every patch site uses
one of two shapes, which restore the same way: :func:`patched` for a block, and
:func:`wrap_attribute` for an object that lives only as long as its patch.
``tests/test_upstream_seams.py`` looks for any other ``setattr`` on upstream objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: Marks an attribute the target did not hold itself (absent, or only inherited).
_ABSENT = object()


def _own_attributes(target: object) -> Any:
    """``target.__dict__`` (a mapping proxy for classes): where ``setattr`` writes and ``delattr`` deletes."""
    try:
        return vars(target)
    except TypeError:
        raise TypeError(f"cannot patch {target!r}: it has no __dict__ to restore attributes into") from None


def _restore(target: object, saved: list[tuple[str, Any]]) -> None:
    """Put every saved attribute back (last set, first restored); try them all, then raise the first error."""
    errors: list[BaseException] = []
    for name, original in reversed(saved):
        try:
            if original is not _ABSENT:
                setattr(target, name, original)
            elif name in _own_attributes(target):
                delattr(target, name)
        except Exception as error:  # restore the others before reporting it
            errors.append(error)
    if errors:
        raise errors[0]


@contextlib.contextmanager
def patched(target: object, /, **attributes: Any) -> Iterator[None]:
    """Set ``attributes`` on ``target`` for the block, then restore each exactly as it was.

    An attribute ``target`` held itself gets its value back; one it did not hold (absent, or
    inherited from its class or a base class) is deleted again. Restoring happens whether the
    block returns or raises, and also when setting a later attribute fails halfway through.
    Patches nest: the innermost is undone first.
    """
    own = _own_attributes(target)
    saved: list[tuple[str, Any]] = []
    try:
        for name, value in attributes.items():
            saved.append((name, own.get(name, _ABSENT)))
            setattr(target, name, value)
        yield
    finally:
        _restore(target, saved)


def wrap_attribute(target: object, name: str, wrap: Callable[[T], T]) -> T:
    """Replace ``target.name`` by ``wrap(target.name)`` for the rest of ``target``'s life; return the original.

    Only for objects discarded with their patch (see the module docstring); anything longer-lived
    goes through :func:`patched`.
    """
    original: T = getattr(target, name)
    setattr(target, name, wrap(original))
    return original
