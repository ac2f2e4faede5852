"""Where error files live and which names count (``backend_reader.layout``): the listings per strategy, and the
``error.pb`` copy that must not count as one more failure."""

from __future__ import annotations

import pytest

from backend_reader.layout import (
    ERROR_FILE_NAME,
    ListingSpec,
    count_error_files,
    error_listings,
    is_single_writer_copy,
)
from backend_reader.strategy import ErrorAggregationStrategy


def test_listings_per_strategy() -> None:
    [default] = error_listings("gs://b/out", "gs://b/raw", ErrorAggregationStrategy.DEFAULT)
    assert default.accepts("error.pb") and not default.accepts("error-w-1.pb")
    outputs, raw = error_listings("gs://b/out/", "gs://b/raw", ErrorAggregationStrategy.EARLIEST)
    assert (outputs.folder, raw.folder) == ("gs://b/out/", "gs://b/raw/errors")
    assert outputs.accepts("error-w-1.pb") and outputs.accepts("error.pb")
    assert not outputs.accepts("outputs.pb") and not outputs.accepts("error-w-1.pb.tmp")
    assert raw.accepts("anything.pb") and not raw.accepts("notes.txt")
    assert len(error_listings("gs://b/out", None, ErrorAggregationStrategy.EARLIEST)) == 1


def test_counting_error_files_ignores_the_error_pb_copy() -> None:
    prefix = "gs://b/out"
    assert count_error_files([f"{prefix}/error.pb"], prefix) == 1
    assert count_error_files([f"{prefix}/error.pb", f"{prefix}/error-a.pb", f"{prefix}/error-b.pb"], prefix) == 2
    assert count_error_files([], prefix) == 0


def test_the_default_listing_asks_the_server_for_error_pb_alone() -> None:
    [spec] = error_listings("/out", None, ErrorAggregationStrategy.DEFAULT)
    assert spec == ListingSpec("/out", ERROR_FILE_NAME, exact_name=ERROR_FILE_NAME)
    assert not spec.accepts("error.pb.tmp") and not spec.accepts("error.pbx")


def test_the_earliest_listing_sends_the_stem_and_the_raw_one_no_prefix() -> None:
    outputs, raw = error_listings("s3://b/out", "s3://b/raw/", ErrorAggregationStrategy.EARLIEST)
    assert (outputs.name_prefix, outputs.exact_name) == ("error", None)
    assert (raw.folder, raw.name_prefix) == ("s3://b/raw/errors", "")
    assert len(error_listings("s3://b/out", "", ErrorAggregationStrategy.EARLIEST)) == 1  # empty: no raw layout


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("error.pb", True),
        ("error-pod-1-0123abcd.rc1c1790000000000000000.pb", True),
        ("errors.pb", True),  # Flyte's Go reader lists by the "error" prefix too
        ("error", False),
        ("error.pb/", False),
        ("Error-a.pb", False),
        ("outputs.pb", False),
        (".error-a.pb", False),
    ],
)
def test_an_outputs_folder_file_is_an_error_file_by_its_stem_and_suffix(name: str, accepted: bool) -> None:
    [outputs] = error_listings("/out", None, ErrorAggregationStrategy.EARLIEST)
    assert outputs.accepts(name) is accepted


def test_only_error_pb_directly_under_the_prefix_is_the_single_writer_copy() -> None:
    assert is_single_writer_copy("gs://b/out/error.pb", "gs://b/out")
    assert not is_single_writer_copy("gs://b/out/error-a.pb", "gs://b/out")
    assert not is_single_writer_copy("gs://b/raw/errors/error.pb", "gs://b/out")
    assert not is_single_writer_copy("gs://b/out/sub/error.pb", "gs://b/out")


def test_a_raw_layout_error_pb_is_counted_as_a_worker() -> None:
    prefix = "gs://b/out"
    assert count_error_files([f"{prefix}/error.pb", "gs://b/raw/errors/error.pb"], prefix) == 1
    assert count_error_files(["gs://b/raw/errors/a.pb", "gs://b/raw/errors/b.pb"], prefix) == 2
