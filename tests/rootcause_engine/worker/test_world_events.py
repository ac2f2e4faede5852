"""A line of a worker's event file that is not an event is refused cleanly (``worker/world_events.py``):
a ``ValueError``, whatever the line holds, never a ``RecursionError`` or any other exception."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rootcause_engine.worker.world_events import WorkerEvent, WorkerState


@pytest.mark.parametrize("line", ["[" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000,
                                  '{"timestamp": ' + "9" * 400 + ', "worker_state": "PAUSED"}',
                                  '{"timestamp": 1, "worker_state": "PAUSED", "pad": "' + "x" * (1 << 17) + '"}'],
                         ids=["100000-deep-array", "100000-deep-object", "timestamp-past-float", "oversized"])
def test_a_line_nested_too_deeply_or_too_large_is_refused_cleanly(line: str) -> None:
    with pytest.raises(ValueError, match="not a soft-restart worker event"):
        WorkerEvent.from_line(line)


def test_an_event_still_reads_back() -> None:
    event = WorkerEvent(1.5, WorkerState.PAUSED)
    assert WorkerEvent.from_line(event.to_line().rstrip("\n")) == event


_KEYS = st.sampled_from(["timestamp", "worker_state", "change_event", "worker_info", "rank", "PAUSED"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["PAUSED", "HEALTHY", "SCALE_UP"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS | st.text(max_size=8), inner, max_size=5),
    max_leaves=12)


@given(_JSON.map(json.dumps) | st.text(max_size=64))
def test_any_line_is_an_event_or_a_value_error(line: str) -> None:
    with contextlib.suppress(ValueError):
        WorkerEvent.from_line(line)
