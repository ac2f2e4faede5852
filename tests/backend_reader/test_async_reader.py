"""The reader's coroutines (``backend_reader.async_reader``) on a real local folder: which files count, bad files
skipped with a reason and never raised, the root-cause read, the settle wait, and ``outputs.pb``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flyteidl.core import literals_pb2

from backend_reader.async_reader import AsyncRemoteFileOutputReader, Listed, OutputsError
from backend_reader.results import ERROR_FILE_BAD_FORMAT, ReadResult
from backend_reader.settings import ReaderSettings
from backend_reader.storage import Storage
from backend_reader.strategy import ErrorAggregationStrategy
from testbed.object_stores import ObjectStore
from testbed.reader_support import BASE_NS, counting_downloads, error_document, write_files


def aio(prefix: str | Path, **settings: Any) -> AsyncRemoteFileOutputReader:
    return AsyncRemoteFileOutputReader(ReaderSettings(str(prefix), **settings))


def write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def reasons(result: ReadResult) -> dict[str, str]:
    return {Path(skip.error_uri).name: skip.reason for skip in result.skipped}


class ListingSpy(AsyncRemoteFileOutputReader):
    """The reader, counting its listings; ``before_listing(n)`` runs before the n-th (from 1), as a pod would
    write its file between two of the reader's polls."""

    def __init__(self, settings: ReaderSettings, before_listing: Callable[[int], None] = lambda _: None) -> None:
        super().__init__(settings)
        self.listings = 0
        self.before_listing = before_listing

    async def _list_error_files(self, storage: Storage) -> Listed:
        self.listings += 1
        self.before_listing(self.listings)
        return await super()._list_error_files(storage)


def test_only_error_files_count_not_outputs_temporaries_folders_or_broken_links(tmp_path: Path) -> None:
    write(tmp_path, {"outputs.pb": b"\x0a\x00", "error-a.pb.tmp": b"x", "notes.txt": b"x", "sub/error-b.pb": b"x"})
    (tmp_path / "error-dir.pb").mkdir()
    os.symlink("error-loop.pb", tmp_path / "error-loop.pb")  # a link to itself: no hang, no error
    os.symlink(tmp_path / "missing", tmp_path / "error-dangling.pb")
    reader = aio(tmp_path)
    assert asyncio.run(reader.is_error()) is False
    result = asyncio.run(reader.read_all())
    assert (result.failures, result.skipped, result.error_files) == ((), (), 0)


def test_an_unreadable_error_file_still_means_the_task_failed(tmp_path: Path) -> None:
    write(tmp_path, {"error-empty.pb": b""})
    assert asyncio.run(aio(tmp_path).is_error()) is True


def test_corrupt_empty_and_oversized_files_are_skipped_with_reasons_and_the_rest_read(file_store: ObjectStore) -> None:
    prefix = file_store.new_prefix("bad")
    huge = error_document("[root cause] " + "h" * (3 * 1024 * 1024), worker="huge", timestamp_ns=BASE_NS - 1)
    files = {
        "error-good-ünï cödé.pb": error_document("[root cause] ValueError", worker="good"),
        "error-empty.pb": b"",
        "error-corrupt.pb": b"\x0a\xff\xff\xff\xff" + bytes(range(256)),
        "error-huge.pb": huge,  # over the default 2 MiB: skipped from its listed size, never downloaded
        "error-outputs.pb": literals_pb2.LiteralMap().SerializeToString() + b"\x0a\x02o0",
    }
    write_files("file", {}, [(f"{prefix}/{name}", data) for name, data in files.items()])
    with counting_downloads() as downloads:
        result = asyncio.run(aio(prefix).read_all())
    assert [f.worker for f in result.failures] == ["good"]
    assert result.error_files == 5 and result.is_error
    found = reasons(result)
    assert set(found) == {"error-empty.pb", "error-corrupt.pb", "error-huge.pb", "error-outputs.pb"}
    assert found["error-huge.pb"] == f"too large: {len(huge)} bytes, over the {2 * 1024 * 1024}-byte limit"
    assert found["error-empty.pb"] == "empty file"
    assert "ErrorDocument" in found["error-corrupt.pb"] and "ErrorDocument" in found["error-outputs.pb"]
    assert "error-huge.pb" not in {Path(path).name for path in downloads}


def test_when_no_file_is_usable_the_error_names_them_and_why(tmp_path: Path) -> None:
    write(tmp_path, {"error-a.pb": b"", "error-b.pb": b"\xff" * 10, "error-c.pb": b"x" * 200})
    outcome = asyncio.run(aio(tmp_path, max_payload_bytes=100).read_error())
    error = outcome.execution_error
    assert error.code == ERROR_FILE_BAD_FORMAT and outcome.is_recoverable
    assert f"none of the 3 error files under {tmp_path} is usable: " in error.message
    assert f"{tmp_path}/error-a.pb: empty file" in error.message
    assert f"{tmp_path}/error-c.pb: too large: 200 bytes" in error.message


def test_the_root_cause_read_returns_the_root_cause_alone(tmp_path: Path) -> None:
    write(tmp_path, {
        "error-a.pb": error_document("[victim] SIGTERM", worker="a", timestamp_ns=BASE_NS - 5),
        "error-b.pb": error_document("[root cause] OOM", worker="b", timestamp_ns=BASE_NS),
        "error-c.pb": b"\xff\xff",
    })
    reader = aio(tmp_path)
    every = asyncio.run(reader.read_all())
    root = asyncio.run(reader.read_root_cause())
    assert [f.worker for f in every.failures] == ["b", "a"]
    assert [f.worker for f in root.failures] == ["b"] and root.error_files == 3
    assert list(reasons(root)) == ["error-c.pb"]  # unkeyed names: every file was read
    assert asyncio.run(reader.read_error()).execution_error.worker == "b"
    assert [f.worker for f in asyncio.run(reader.failures())] == ["b", "a"]


def test_the_raw_layout_is_read_only_with_its_prefix_and_default_reads_only_error_pb(tmp_path: Path) -> None:
    out, raw = tmp_path / "out", tmp_path / "raw"
    write(out, {
        "error.pb": error_document("ValueError: the shared file", worker="shared", timestamp_ns=BASE_NS + 9),
        "error-w.pb": error_document("[root cause] own file", worker="w", timestamp_ns=BASE_NS + 5),
    })
    write(raw, {"errors/pod-r.pb": error_document("[root cause] raw", worker="r"), "errors/notes.txt": b"x"})
    with_raw = asyncio.run(aio(out, raw_output_prefix=str(raw)).read_all())
    assert [f.worker for f in with_raw.failures] == ["r", "w", "shared"]
    assert [f.worker for f in asyncio.run(aio(out).read_all()).failures] == ["w", "shared"]
    default = asyncio.run(aio(out, raw_output_prefix=str(raw), strategy=ErrorAggregationStrategy.DEFAULT).read_all())
    assert [f.worker for f in default.failures] == ["shared"] and default.error_files == 1


def test_the_settle_wait_lists_again_until_the_expected_files_are_there(tmp_path: Path) -> None:
    """``error.pb`` copies a worker's file: with it and one per-worker file, one worker of two has written."""
    document = error_document("[victim] SIGTERM", worker="a")
    write(tmp_path, {"error.pb": document, "error-a.pb": document})

    def late_pod(listing: int) -> None:
        if listing == 2:
            write(tmp_path, {"error-b.pb": error_document("[root cause] slow pod", worker="b")})

    # the second file ends the wait as soon as it is listed; the timeout only bounds a broken test
    reader = ListingSpy(ReaderSettings(str(tmp_path), expected_workers=2, settle_timeout=120), late_pod)
    result = asyncio.run(reader.read_all())
    assert reader.listings == 2
    assert [f.worker for f in result.failures] == ["b", "a"]


def test_a_zero_settle_timeout_decides_with_the_first_listing(tmp_path: Path) -> None:
    write(tmp_path, {"error-a.pb": error_document(worker="a")})
    reader = ListingSpy(ReaderSettings(str(tmp_path), expected_workers=50, settle_timeout=0))
    assert [f.worker for f in asyncio.run(reader.read_all()).failures] == ["a"]
    assert reader.listings == 1


def test_the_default_strategy_waits_for_error_pb_alone_whatever_the_worker_count(tmp_path: Path) -> None:
    write(tmp_path, {"error.pb": error_document(worker="a")})
    settings = ReaderSettings(str(tmp_path), strategy=ErrorAggregationStrategy.DEFAULT, expected_workers=8,
                              settle_timeout=5)
    reader = ListingSpy(settings)
    assert [f.worker for f in asyncio.run(reader.read_all()).failures] == ["a"]
    assert reader.listings == 1


def test_is_error_does_not_wait_for_expected_workers(tmp_path: Path) -> None:
    reader = ListingSpy(ReaderSettings(str(tmp_path), expected_workers=3, settle_timeout=120))
    assert asyncio.run(reader.is_error()) is False
    assert reader.listings == 1


def test_the_settings_are_read_at_each_call(tmp_path: Path) -> None:
    write(tmp_path, {"error-a.pb": error_document(worker="a")})
    settings = ReaderSettings(str(tmp_path))
    reader = AsyncRemoteFileOutputReader(settings)
    assert [f.worker for f in asyncio.run(reader.read_all()).failures] == ["a"]
    settings.max_payload_bytes = 10
    assert reasons(asyncio.run(reader.read_all()))["error-a.pb"].startswith("too large")


@pytest.mark.parametrize("data", [b"\xff\xff\xff", b"\x0a\x05\x0a\x03"])
def test_corrupt_outputs_are_an_outputs_error(tmp_path: Path, data: bytes) -> None:
    write(tmp_path, {"outputs.pb": data})
    reader = aio(tmp_path)
    assert asyncio.run(reader.exists()) is True
    with pytest.raises(OutputsError, match=rf"^outputs at {tmp_path}/outputs\.pb are not a LiteralMap: "):
        asyncio.run(reader.read())


def test_outputs_without_literals_are_the_go_readers_no_outputs_error(tmp_path: Path) -> None:
    write(tmp_path, {"outputs.pb": literals_pb2.LiteralMap().SerializeToString()})
    outputs, error = asyncio.run(aio(tmp_path).read())
    assert outputs is None and error is not None
    assert error.execution_error.code == "No outputs produced"
    assert error.execution_error.message == f"outputs not found at [{tmp_path}/outputs.pb]"
    assert error.is_recoverable is True


@pytest.mark.parametrize("kind", ["absent", "fifo", "folder"])
def test_outputs_that_are_no_regular_file_are_not_found_and_never_block_the_read(tmp_path: Path, kind: str) -> None:
    """A FIFO nobody writes would block a read for good: it, a folder and no file at all are "not found"."""
    outputs = tmp_path / "outputs.pb"
    if kind == "fifo":
        os.mkfifo(outputs)
    elif kind == "folder":
        outputs.mkdir()
    reader = aio(tmp_path)
    assert asyncio.run(reader.exists()) is False
    with pytest.raises(OutputsError, match=rf"^outputs not found at {tmp_path}/outputs\.pb$"):
        asyncio.run(reader.read())
