"""Worker names and error file names: readable for real pod names, contained for hostile ones."""

from __future__ import annotations

import os
import re

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given
from hypothesis import strategies as st

from flytekitplugins_rootcause.entrypoint.error_documents import per_worker_file_name, plan_flytekit_error
from rootcause_core.timestamps import to_protobuf
from rootcause_core.worker_names import (
    MAX_DISPLAY_NAME_LENGTH,
    MAX_WORKER_NAME_LENGTH,
    UNKNOWN_WORKER,
    display_worker_name,
    raw_worker_name,
    sanitize_worker_name,
)
from testbed.reader_support import BASE_NS, per_worker_name_pattern

# Flyte's aggregating reader lists names starting with "error" and ending with ".pb".
PER_WORKER_NAME = per_worker_name_pattern()
TOKEN = "0123456789abcdef0123456789abcdef"
KEY = plan_flytekit_error("[root cause] RuntimeError: boom", to_protobuf(BASE_NS + 7)).listing_key


@pytest.mark.parametrize(
    "name",
    ["my-job-worker-0", "pytorchjob-a1b2c3-master-0", "Host_7.example.com", "w0"],
)
def test_real_pod_and_host_names_pass_through_unchanged(name: str) -> None:
    assert sanitize_worker_name(name) == name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../../etc/passwd", "_etc_passwd"),
        ("a/b", "a_b"),
        ("a\\b", "a_b"),
        ("..", UNKNOWN_WORKER),
        (".hidden", "_hidden"),
        ("-rf", "_rf"),
        ("pod\n0", "pod_0"),
        ("pod\x00\x1b[31m0", "pod_31m0"),
        ("wörker-0", "w_rker-0"),
        ("", UNKNOWN_WORKER),
        ("///", UNKNOWN_WORKER),
        ("a..b", "a_b"),
    ],
)
def test_hostile_names_are_made_safe_and_stay_readable(name: str, expected: str) -> None:
    assert sanitize_worker_name(name) == expected


def test_long_names_are_bounded_and_stay_distinct() -> None:
    first, second = "w" * 200 + "-a", "w" * 200 + "-b"
    safe_first, safe_second = sanitize_worker_name(first), sanitize_worker_name(second)
    assert len(safe_first) == len(safe_second) == MAX_WORKER_NAME_LENGTH
    assert safe_first != safe_second
    assert safe_first.startswith("wwww")


def test_too_small_a_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_length"):
        sanitize_worker_name("worker", max_length=4)


@given(st.text(max_size=300))
def test_any_name_gives_one_safe_path_segment(name: str) -> None:
    safe = sanitize_worker_name(name)
    assert 0 < len(safe) <= MAX_WORKER_NAME_LENGTH
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", safe)
    assert ".." not in safe
    assert not safe.startswith((".", "-"))


@given(st.text(max_size=300))
def test_no_name_moves_the_error_file_out_of_the_prefix(name: str) -> None:
    prefix = "/bucket/run/out"
    file_name = per_worker_file_name(name, TOKEN, KEY)
    assert PER_WORKER_NAME.fullmatch(file_name)
    joined = os.path.normpath(f"{prefix}/{file_name}")
    assert os.path.dirname(joined) == prefix


@given(st.text(max_size=1000))
def test_display_names_are_one_bounded_line_of_valid_utf8(name: str) -> None:
    shown = display_worker_name(name)
    assert 0 < len(shown) <= MAX_DISPLAY_NAME_LENGTH
    shown.encode("utf-8")  # protobuf strings must be valid UTF-8
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", shown)


def test_display_name_keeps_real_names_and_escapes_undecodable_bytes() -> None:
    assert display_worker_name("my-job-worker-3") == "my-job-worker-3"
    undecodable = os.fsdecode(b"pod-\xff")  # what os.environ holds for a non-UTF-8 value
    assert display_worker_name(undecodable) == "pod-\\udcff"


def test_worker_name_comes_from_the_backend_then_the_host() -> None:
    def host() -> str:
        return "node-7"

    assert raw_worker_name({"FLYTE_INTERNAL_WORKER_NAME": "a", "_F_WN": "b"}, host) == "a"
    assert raw_worker_name({"_F_WN": "b"}, host) == "b"
    assert raw_worker_name({"FLYTE_INTERNAL_WORKER_NAME": "", "_F_WN": "b"}, host) == "b"
    assert raw_worker_name({}, host) == "node-7"


def test_file_name_token_must_be_a_plain_token() -> None:
    with pytest.raises(ValueError, match="token"):
        per_worker_file_name("w", "../x", KEY)


def test_file_name_carries_the_role_and_time_the_reader_will_parse() -> None:
    """(That the plan's key is the reader's parse of the written bytes: ``test_plan.py``.)"""
    candidate = per_worker_file_name("pod-1", TOKEN, KEY)
    assert candidate == f"error-pod-1-{TOKEN}.rc1c{BASE_NS + 7}.pb"
    victim = plan_flytekit_error("[victim] connection closed by peer", Timestamp())  # the zero time: none
    assert per_worker_file_name("pod-2", TOKEN, victim.listing_key) == f"error-pod-2-{TOKEN}.rc1vn.pb"


def test_a_document_the_reader_would_skip_gets_a_plain_name() -> None:
    impossible = plan_flytekit_error("[root cause] boom", Timestamp(seconds=2**40))  # past year 9999
    assert impossible.listing_key is None
    assert per_worker_file_name("pod-1", TOKEN, impossible.listing_key) == f"error-pod-1-{TOKEN}.pb"
