"""A flytekit context of the test's own, whose Decks the test reads: the report's and the worker's tests
publish into it."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator

import flytekit
from flytekit.core.context_manager import ExecutionParameters, FlyteContextManager


@contextlib.contextmanager
def task_decks() -> Iterator[list[flytekit.Deck]]:
    """The Decks of a flytekit context made for this block (no other test sees them)."""
    ctx = FlyteContextManager.current_context()
    params = ExecutionParameters(execution_date=datetime.datetime.now(datetime.UTC), tmp_dir="/tmp",
                                 stats=None, execution_id=None, logging=None, raw_output_prefix="", decks=[])
    with FlyteContextManager.with_context(ctx.with_execution_state(ctx.new_execution_state().with_params(
            user_space_params=params))) as running:
        yield running.user_space_params.decks
