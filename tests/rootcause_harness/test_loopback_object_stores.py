"""The loopback stores work for plain fsspec I/O, including create-if-absent writes."""

from __future__ import annotations

import pytest

from testbed.object_stores import ObjectStore


@pytest.mark.slow
def test_store_roundtrip_and_create_if_absent(any_store: ObjectStore) -> None:
    fs = any_store.filesystem()
    prefix = any_store.new_prefix("smoke")
    path = f"{prefix}/error.pb"
    fs.makedirs(prefix, exist_ok=True)
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second", mode="create")
    assert fs.cat_file(path) == b"first"
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(prefix, detail=False)] == ["error.pb"]
