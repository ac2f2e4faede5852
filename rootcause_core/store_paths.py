"""Paths in an object store or a local folder, as plain strings: one way to join and to split them.

Both sides name files under a task's output prefix (``s3://bucket/run/0``, ``gs://...``,
``file:///tmp/out`` or a plain local path): the pod writes ``<prefix>/error-....pb``, the reader
lists and reads the same names. Joined here only, so a doubled or missing slash cannot make the
two sides disagree about where a file is.
"""

from __future__ import annotations


def join(prefix: str, *names: str) -> str:
    """``prefix`` (URL or local path) and relative ``names``, with single slashes between them."""
    return "/".join([prefix.rstrip("/")] + [name.strip("/") for name in names])


def base_name(path: str) -> str:
    """The last component of an object path, URL or local path."""
    return path.rstrip("/").rsplit("/", 1)[-1]
