"""A task function shipped by value (as kfpytorch's ``spawn`` path ships it) keeps its source lines."""

from __future__ import annotations

import traceback

import cloudpickle
import pytest

from rootcause_engine.worker.recorder import RecordingTaskFunction
from rootcause_engine.worker.source_lines import CLOUDPICKLE_PLACEHOLDER


def _shipped(function: object) -> RecordingTaskFunction:
    return cloudpickle.loads(cloudpickle.dumps(RecordingTaskFunction(function)))  # type: ignore[arg-type]


def _traceback_of(call: object) -> str:
    with pytest.raises(ValueError) as excinfo:
        call()  # type: ignore[operator]
    return "".join(traceback.format_exception(excinfo.value))


def test_a_function_pickled_by_value_shows_the_line_that_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rootcause_engine.worker.recorder.RootCauseErrorHandler.record_exception",
                        lambda self, exc: None)

    def train() -> None:
        raise ValueError("bad batch")  # the line the report must show

    shipped = _shipped(train)
    assert shipped.function is not train  # by value, as in a spawned worker
    text = _traceback_of(shipped)
    assert "the line the report must show" in text
    assert CLOUDPICKLE_PLACEHOLDER not in text
    assert __file__ in text


def test_inner_functions_of_the_task_function_keep_their_file_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rootcause_engine.worker.recorder.RootCauseErrorHandler.record_exception",
                        lambda self, exc: None)

    def train() -> None:
        def step() -> None:
            raise ValueError("inner")  # an inner function's line

        step()

    text = _traceback_of(_shipped(train))
    assert "an inner function's line" in text
    assert CLOUDPICKLE_PLACEHOLDER not in text


def test_a_callable_without_code_ships_unchanged() -> None:
    shipped = _shipped(len)
    assert shipped.source_file is None
    assert shipped.function is len
