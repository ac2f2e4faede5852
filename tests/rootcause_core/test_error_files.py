"""Error file names (``rootcause_core.error_files``): which names are error files, a pod's own file name,
and the listing key (role and time) a writer puts in it. The name round trip is in ``test_read_plan.py``."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from rootcause_core.error_files import (
    ERROR_FILE_NAME,
    ListingKey,
    content_listing_key,
    is_error_file_name,
    is_file_of,
    keyed_file_name,
    listing_key_for_container,
    listing_key_of,
    per_worker_stem,
)
from rootcause_core.ordering import Role
from rootcause_core.testimony import VICTIM_STAMP_DELAY_NS, for_failure, with_testimony

NS = 1_000_000_000
BASE_NS = 1_790_000_000 * NS
TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("name", "is_error"),
    [
        (ERROR_FILE_NAME, True),
        (f"error-{TOKEN}.pb", True),
        (f"error-pod-1-{TOKEN}.rc1c{BASE_NS}.pb", True),
        ("outputs.pb", False),
        ("error-pod-1.pb.tmp", False),
        ("ERROR.pb", False),
    ],
)
def test_error_file_names_are_the_ones_flytes_aggregating_reader_lists(name: str, is_error: bool) -> None:
    assert is_error_file_name(name) is is_error


def test_a_per_worker_stem_sanitizes_the_worker_and_keeps_the_token() -> None:
    assert per_worker_stem("pod-1", TOKEN) == f"error-pod-1-{TOKEN}"
    assert per_worker_stem("../../etc/passwd", "abc") == "error-_etc_passwd-abc"
    assert "/" not in per_worker_stem("ns/pod 1\n", "abc")


@pytest.mark.parametrize("token", ["", "a-b", "a.b", "../x", "abc def"])
def test_a_token_that_could_break_the_name_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="token must be a non-empty alphanumeric string"):
        per_worker_stem("pod-1", token)


def test_a_file_is_a_workers_with_or_without_a_listing_key() -> None:
    stem = per_worker_stem("pod-1", TOKEN)
    assert is_file_of(f"{stem}.pb", "pod-1")
    assert is_file_of(keyed_file_name(stem, ListingKey(Role.VICTIM, BASE_NS)), "pod-1")
    assert is_file_of(f"{per_worker_stem('ns/pod 1', TOKEN)}.pb", "ns/pod 1")  # matched through the sanitized name


@pytest.mark.parametrize(
    "name",
    [
        f"error-pod-10-{TOKEN}.pb",  # another worker whose name starts the same
        f"error-pod-1-x-{TOKEN}.pb",  # worker "pod-1-x"
        "error-pod-1-.pb",  # no token
        f"error-pod-1-{TOKEN}.pb.tmp",
        ERROR_FILE_NAME,
    ],
)
def test_another_workers_file_or_a_stray_name_is_not_pod_1s(name: str) -> None:
    assert not is_file_of(name, "pod-1")


@pytest.mark.parametrize(
    ("key", "token"),
    [
        (ListingKey(Role.CANDIDATE, 1_790_000_000_123_456_789), "rc1c1790000000123456789"),
        (ListingKey(Role.VICTIM, None), "rc1vn"),
        (ListingKey(Role.LOST_POD, -5), "rc1l-5"),
    ],
)
def test_a_keys_token_is_format_role_letter_and_time(key: ListingKey, token: str) -> None:
    assert key.token() == token
    assert keyed_file_name("error-a", key) == f"error-a.{token}.pb"
    assert listing_key_of(f"error-a.{token}.pb") == key


def test_keys_sort_by_the_rules_role_then_time_with_no_time_last() -> None:
    keys = [
        ListingKey(Role.VICTIM, BASE_NS - 10),
        ListingKey(Role.CANDIDATE, None),
        ListingKey(Role.LOST_POD, BASE_NS - 20),
        ListingKey(Role.CANDIDATE, BASE_NS + 1),
        ListingKey(Role.CANDIDATE, BASE_NS),
    ]
    assert sorted(keys, key=lambda key: key.sort_key) == [
        ListingKey(Role.CANDIDATE, BASE_NS),
        ListingKey(Role.CANDIDATE, BASE_NS + 1),
        ListingKey(Role.CANDIDATE, None),
        ListingKey(Role.LOST_POD, BASE_NS - 20),
        ListingKey(Role.VICTIM, BASE_NS - 10),
    ]


def test_a_key_agrees_only_with_a_failure_of_its_role_and_time() -> None:
    key = ListingKey(Role.CANDIDATE, BASE_NS)
    assert key.agrees_with(ListingKey(Role.CANDIDATE, BASE_NS))
    assert not key.agrees_with(ListingKey(Role.CANDIDATE, BASE_NS + 1))
    assert not key.agrees_with(ListingKey(Role.VICTIM, BASE_NS))
    assert not key.agrees_with(ListingKey(Role.CANDIDATE, None))


def test_the_content_key_takes_the_role_from_the_message_and_the_true_time_from_a_testimony() -> None:
    assert content_listing_key("[root cause] OOM", BASE_NS) == ListingKey(Role.CANDIDATE, BASE_NS)
    assert content_listing_key("RuntimeError: Connection reset by peer", None) == ListingKey(Role.VICTIM, None)
    moved = with_testimony("[victim] torn down", for_failure(BASE_NS, victim=True))
    assert content_listing_key(moved, BASE_NS + VICTIM_STAMP_DELAY_NS) == ListingKey(Role.VICTIM, BASE_NS)
    assert content_listing_key(moved, BASE_NS + 7) == ListingKey(Role.VICTIM, BASE_NS + 7)  # unexplained: kept


def test_a_writers_key_follows_the_readers_time_rule() -> None:
    stamp = Timestamp(seconds=BASE_NS // NS, nanos=5)
    assert listing_key_for_container("[root cause] OOM", stamp) == ListingKey(Role.CANDIDATE, BASE_NS + 5)
    assert listing_key_for_container("[victim] SIGTERM", None) == ListingKey(Role.VICTIM, None)
    assert listing_key_for_container("[root cause] OOM", Timestamp()) == ListingKey(Role.CANDIDATE, None)  # 1970
    assert listing_key_for_container("[root cause] OOM", Timestamp(seconds=1, nanos=-1)) is None  # reader skips it


def test_a_writers_key_reads_the_message_as_shown_with_controls_escaped() -> None:
    """The reader classifies ``safe_text(message)``; the writer must too, or a raw control byte in front of
    the marker could make the two disagree."""
    assert listing_key_for_container("\x00[root cause] x", None) == content_listing_key("\\x00[root cause] x", None)


@pytest.mark.parametrize("stem", ["outputs", "error/x", "../error"])
def test_a_keyed_name_must_start_with_the_stem_and_stay_in_the_folder(stem: str) -> None:
    with pytest.raises(ValueError, match="must start with 'error' and hold no '/'"):
        keyed_file_name(stem, ListingKey(Role.CANDIDATE, 1))
