"""Bounded concurrent downloads of listed error files (``backend_reader.batch_read``), on a real local folder:
every bad file ends as a skipped file with its reason, and only a store that fails every read raises."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend_reader.aggregate import Collector
from backend_reader.batch_read import BatchReader, for_each_bounded
from backend_reader.results import ReadResult
from backend_reader.storage import ObjectInfo, Storage, StorageError
from testbed.reader_support import counting_downloads, error_document


def listed(folder: Path, files: dict[str, bytes], sizes: dict[str, int] | None = None) -> list[tuple[str, ObjectInfo]]:
    """Write ``files`` into ``folder`` and list them as a listing would (``sizes`` overrides a listed size)."""
    entries = []
    for name, data in sorted(files.items()):
        path = folder / name
        path.write_bytes(data)
        entries.append((str(path), ObjectInfo(str(path), name, (sizes or {}).get(name, len(data)))))
    return entries


def read_all(
    folder: Path, entries: list[tuple[str, ObjectInfo]], max_payload_bytes: int = 4096, message_limit: int = 100_000
) -> tuple[list[str], ReadResult]:
    """Read every readable entry in one batch: (workers of the failures the batch returned, the result)."""

    async def run() -> tuple[list[str], ReadResult]:
        async with Storage.for_url(str(folder)) as storage:
            reads = BatchReader(
                storage, Collector(str(folder), error_files=len(entries)), entries, max_payload_bytes, 4, message_limit
            )
            failures = await reads.read(reads.readable)
            return sorted(f.worker for f in failures), reads.result()

    return asyncio.run(run())


def reasons(result: ReadResult) -> dict[str, str]:
    return {Path(skip.error_uri).name: skip.reason for skip in result.skipped}


def test_corrupt_empty_and_foreign_files_are_skipped_and_the_good_ones_read(tmp_path: Path) -> None:
    entries = listed(tmp_path, {
        "error-good.pb": error_document(worker="good"),
        "error-empty.pb": b"",
        "error-corrupt.pb": b"\x0a\xff\xff\xff\xff",
        "error-text.pb": b"Traceback (most recent call last):\n",
        "error-truncated.pb": error_document("[root cause] cut short", worker="t")[:-5],
    })
    workers, result = read_all(tmp_path, entries)
    assert workers == ["good"] and [f.worker for f in result.failures] == ["good"]
    found = reasons(result)
    assert set(found) == {"error-empty.pb", "error-corrupt.pb", "error-text.pb", "error-truncated.pb"}
    assert found["error-empty.pb"] == "empty file"
    assert all(reason for reason in found.values())
    assert "corrupt or truncated" in found["error-corrupt.pb"] and "corrupt or truncated" in found["error-truncated.pb"]


def test_a_file_listed_over_the_limit_is_skipped_without_a_download(tmp_path: Path) -> None:
    entries = listed(tmp_path, {"error-big.pb": error_document("x" * 5000), "error-small.pb": error_document()})

    async def run() -> tuple[list[tuple[str, ObjectInfo]], ReadResult, list[str]]:
        async with Storage.for_url(str(tmp_path)) as storage:
            reads = BatchReader(storage, Collector(str(tmp_path), error_files=2), entries, 4096, 4, 100_000)
            with counting_downloads() as downloads:
                await reads.read(reads.readable)
            return reads.readable, reads.result(), downloads

    readable, result, downloads = asyncio.run(run())
    assert [info.name for _, info in readable] == ["error-small.pb"]
    assert [Path(path).name for path in downloads] == ["error-small.pb"]
    size = (tmp_path / "error-big.pb").stat().st_size
    assert reasons(result) == {"error-big.pb": f"too large: {size} bytes, over the 4096-byte limit"}
    assert result.error_files == 2 and len(result.failures) == 1


def test_a_file_that_grew_after_listing_is_skipped_once_read(tmp_path: Path) -> None:
    data = error_document("[root cause] " + "y" * 600)
    entries = listed(tmp_path, {"error-grown.pb": data}, sizes={"error-grown.pb": 10})
    workers, result = read_all(tmp_path, entries, max_payload_bytes=100)
    assert workers == []
    assert reasons(result) == {"error-grown.pb": f"grew to {len(data)} bytes after listing, over the limit"}


def test_a_file_deleted_after_listing_is_skipped(tmp_path: Path) -> None:
    entries = listed(tmp_path, {"error-gone.pb": error_document(worker="gone"), "error-kept.pb": error_document()})
    (tmp_path / "error-gone.pb").unlink()
    workers, result = read_all(tmp_path, entries)
    assert workers == ["worker-0"]
    assert reasons(result) == {"error-gone.pb": "deleted between listing and reading"}


def test_one_unreadable_object_among_readable_ones_is_a_skipped_file(tmp_path: Path) -> None:
    entries = listed(tmp_path, {"error-ok.pb": error_document(worker="ok")})
    (tmp_path / "error-dir.pb").mkdir()  # listed as a file, read as a folder: the store's read fails
    entries.append((str(tmp_path / "error-dir.pb"), ObjectInfo(str(tmp_path / "error-dir.pb"), "error-dir.pb", 0)))
    workers, result = read_all(tmp_path, entries)
    assert workers == ["ok"]
    expected = f"could not be read: reading file://{tmp_path}/error-dir.pb failed: IsADirectoryError"
    assert reasons(result)["error-dir.pb"].startswith(expected)


def test_when_every_read_fails_in_the_store_the_result_is_that_storage_error(tmp_path: Path) -> None:
    entries = []
    for name in ("error-a.pb", "error-b.pb"):
        (tmp_path / name).mkdir()
        entries.append((str(tmp_path / name), ObjectInfo(str(tmp_path / name), name, 0)))
    with pytest.raises(StorageError, match=r"^reading file://.*/error-[ab]\.pb failed: IsADirectoryError"):
        read_all(tmp_path, entries)


def test_a_message_is_cut_to_the_readers_limit(tmp_path: Path) -> None:
    entries = listed(tmp_path, {"error-long.pb": error_document("[root cause] " + "z" * 2000, worker="long")})
    _, result = read_all(tmp_path, entries, message_limit=200)
    [failure] = result.failures
    assert "<Message Truncated>" in failure.message and len(failure.message.encode()) < 300


def test_nothing_listed_reads_nothing_and_is_no_error(tmp_path: Path) -> None:
    workers, result = read_all(tmp_path, [])
    assert (workers, result.failures, result.skipped, result.is_error) == ([], (), (), False)


def test_at_most_limit_items_are_worked_on_at_once_and_every_item_once() -> None:
    running, most, done = 0, 0, []

    async def work(item: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1
        done.append(item)

    asyncio.run(for_each_bounded(range(20), work, 3))
    assert most == 3 and sorted(done) == list(range(20))


def test_a_limit_above_the_item_count_and_no_items_are_fine() -> None:
    seen: list[int] = []

    async def work(item: int) -> None:
        seen.append(item)

    asyncio.run(for_each_bounded([1, 2], work, 64))
    asyncio.run(for_each_bounded([], work, 4))
    assert sorted(seen) == [1, 2]


def test_the_first_error_is_raised_as_itself_and_cancels_the_rest() -> None:
    started: list[int] = []
    cancelled: list[int] = []

    async def work(item: int) -> None:
        started.append(item)
        if item == 2:
            raise ValueError("file 2 broke")
        try:
            await asyncio.Event().wait()  # never set: only a cancellation ends it
        except asyncio.CancelledError:
            cancelled.append(item)
            raise

    with pytest.raises(ValueError, match=r"^file 2 broke$"):
        asyncio.run(for_each_bounded(range(10), work, 3))
    assert sorted(started) == [0, 1, 2] and sorted(cancelled) == [0, 1]
