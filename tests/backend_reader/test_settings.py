"""A reader's settings (``backend_reader.settings``): the defaults, the checks on bounds, and the prefixes
and strategy as every call reads them."""

from __future__ import annotations

from typing import Any

import pytest

from backend_reader.aggregate import DEFAULT_SUMMARY_BYTES
from backend_reader.messages import MAX_MESSAGE_BYTES
from backend_reader.settings import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_SETTLE_TIMEOUT_S,
    ReaderSettings,
)
from backend_reader.storage import RetryPolicy
from backend_reader.strategy import ErrorAggregationStrategy


def test_defaults_read_every_error_file_without_waiting() -> None:
    settings = ReaderSettings("gs://bucket/out")
    assert settings.strategy is ErrorAggregationStrategy.EARLIEST
    assert settings.raw_output_prefix is None
    assert settings.expected_workers is None  # no settle wait unless asked
    assert settings.max_concurrency == DEFAULT_MAX_CONCURRENCY
    assert settings.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES
    assert settings.max_payload_bytes == 2 * 1024 * 1024  # propeller's payload limit
    assert settings.settle_timeout == DEFAULT_SETTLE_TIMEOUT_S
    assert (settings.message_limit_bytes, settings.summary_bytes) == (MAX_MESSAGE_BYTES, DEFAULT_SUMMARY_BYTES)
    assert settings.retry is None and settings.storage_options == {}


def test_trailing_slashes_are_dropped_and_an_empty_raw_prefix_is_none() -> None:
    settings = ReaderSettings("s3://bucket/out//", raw_output_prefix="s3://bucket/raw/")
    assert (settings.output_prefix, settings.raw_output_prefix) == ("s3://bucket/out", "s3://bucket/raw")
    assert ReaderSettings("/tmp/out", raw_output_prefix="").raw_output_prefix is None


def test_a_strategy_given_by_name_becomes_the_enum() -> None:
    settings = ReaderSettings("/out", strategy="default")  # type: ignore[arg-type]
    assert settings.strategy is ErrorAggregationStrategy.DEFAULT
    with pytest.raises(ValueError, match="'first' is not a valid ErrorAggregationStrategy"):
        ReaderSettings("/out", strategy="first")  # type: ignore[arg-type]


def test_storage_options_are_copied_so_the_callers_dict_cannot_change_them() -> None:
    options = {"endpoint_url": "http://127.0.0.1:1"}
    settings = ReaderSettings("s3://b/out", storage_options=options)
    options["endpoint_url"] = "http://elsewhere"
    assert settings.storage_options == {"endpoint_url": "http://127.0.0.1:1"}


def test_every_argument_is_kept_as_given() -> None:
    retry = RetryPolicy(attempts=2)
    settings = ReaderSettings(
        "/out", max_payload_bytes=1, max_concurrency=1, expected_workers=1, settle_timeout=0,
        retry=retry, message_limit_bytes=10, summary_bytes=5,
    )
    assert (settings.max_payload_bytes, settings.max_concurrency, settings.expected_workers) == (1, 1, 1)
    assert (settings.settle_timeout, settings.retry, settings.message_limit_bytes, settings.summary_bytes) == (
        0, retry, 10, 5,
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_payload_bytes": 0}, "max_payload_bytes and max_concurrency must be at least 1"),
        ({"max_concurrency": 0}, "max_payload_bytes and max_concurrency must be at least 1"),
        ({"max_concurrency": -3}, "max_payload_bytes and max_concurrency must be at least 1"),
        ({"expected_workers": 0}, "expected_workers must be at least 1"),
        ({"settle_timeout": -0.1}, "settle_timeout must not be negative"),
    ],
)
def test_impossible_bounds_are_refused_at_construction(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReaderSettings("/out", **arguments)
