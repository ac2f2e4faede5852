"""Listing the log handlers torch created (``rootcause_engine/upstream/torch_logging.py``), read from torch's
own weak set of them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from torch._logging import _internal

from rootcause_engine.upstream import versions
from rootcause_engine.upstream.torch_logging import SYMBOLS, torch_log_handlers


@pytest.fixture(autouse=True)
def _fresh_checks() -> Iterator[None]:
    versions.forget_checks()
    yield
    versions.forget_checks()


class _NotAHandler:
    """Something else that landed in torch's set (weakly referenced, like its handlers)."""


def test_the_listed_handlers_are_the_ones_torch_keeps_now() -> None:
    handlers = torch_log_handlers()
    assert handlers == [h for h in list(_internal.handlers) if isinstance(h, logging.Handler)]
    assert all(isinstance(handler, logging.Handler) for handler in handlers)


def test_a_handler_torch_adds_later_is_listed_and_other_objects_are_not() -> None:
    added, stranger = logging.NullHandler(), _NotAHandler()
    _internal.handlers.add(added)
    _internal.handlers.add(stranger)
    try:
        listed = torch_log_handlers()
        assert added in listed
        assert not any(item is stranger for item in listed)
    finally:
        _internal.handlers.discard(added)
        _internal.handlers.discard(stranger)
    assert added not in torch_log_handlers()


def test_the_list_is_a_copy_the_caller_may_change() -> None:
    listed = torch_log_handlers()
    before = len(_internal.handlers)
    listed.clear()
    assert len(_internal.handlers) == before


def test_a_torch_without_the_handler_set_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(_internal, "handlers")
    with pytest.raises(versions.UnsupportedUpstreamError) as raised:
        torch_log_handlers()
    assert SYMBOLS[0].qualified_name == "torch._logging._internal.handlers"
    assert "has no torch._logging._internal.handlers, which the plugin reads, to filter torch's log handlers" in str(
        raised.value
    )
