"""Joining and splitting store paths (``rootcause_core.store_paths``): single slashes whatever the caller gave,
for URLs and local paths alike."""

from __future__ import annotations

import pytest

from rootcause_core.store_paths import base_name, join


@pytest.mark.parametrize(
    ("prefix", "names", "joined"),
    [
        ("gs://bucket/run/0", ("error.pb",), "gs://bucket/run/0/error.pb"),
        ("gs://bucket/run/0/", ("/error.pb",), "gs://bucket/run/0/error.pb"),
        ("s3://bucket/raw//", ("errors/", "/a.pb"), "s3://bucket/raw/errors/a.pb"),
        ("/tmp/out", ("errors", "x.pb"), "/tmp/out/errors/x.pb"),
        ("file:///tmp/out", ("error.pb",), "file:///tmp/out/error.pb"),
        ("relative", ("a/b", "c"), "relative/a/b/c"),
    ],
)
def test_join_puts_single_slashes_between_the_parts(prefix: str, names: tuple[str, ...], joined: str) -> None:
    assert join(prefix, *names) == joined


def test_join_keeps_a_names_inner_slashes_and_drops_a_lone_prefixs_trailing_ones() -> None:
    assert join("gs://bucket", "a//b") == "gs://bucket/a//b"
    assert join("gs://bucket/out") == "gs://bucket/out"
    assert join("gs://bucket/out/") == "gs://bucket/out"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("gs://bucket/run/0/error-a.pb", "error-a.pb"),
        ("s3://bucket/run/0/", "0"),
        ("/tmp/out/errors//", "errors"),
        ("error.pb", "error.pb"),
        ("", ""),
    ],
)
def test_base_name_is_the_last_component(path: str, name: str) -> None:
    assert base_name(path) == name


def test_base_name_of_a_join_is_the_last_name_joined() -> None:
    assert base_name(join("gs://bucket/out/", "errors/", "/pod-1.pb")) == "pod-1.pb"
