"""The synchronous reader (``backend_reader.reader``) on a real local folder: each call gives what its coroutine
twin gives, also from inside a running event loop, and bad files end as skipped files, never as exceptions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from flyteidl.core import literals_pb2

from backend_reader.async_reader import AsyncRemoteFileOutputReader
from backend_reader.reader import OutputsError, PayloadTooLargeError, RemoteFileOutputReader
from backend_reader.results import ERROR_FILE_BAD_FORMAT
from backend_reader.settings import ReaderSettings
from testbed.object_stores import ObjectStore
from testbed.reader_support import BASE_NS, error_document, worker_file_name, write_files


def outputs_bytes(value: int) -> bytes:
    literal = literals_pb2.Literal(scalar=literals_pb2.Scalar(primitive=literals_pb2.Primitive(integer=value)))
    return literals_pb2.LiteralMap(literals={"o0": literal}).SerializeToString()


def test_every_call_gives_what_its_coroutine_gives(tmp_path: Path) -> None:
    (tmp_path / "outputs.pb").write_bytes(outputs_bytes(7))
    (tmp_path / "error-a.pb").write_bytes(error_document("[victim] SIGTERM", worker="a", timestamp_ns=BASE_NS - 1))
    (tmp_path / "error-b.pb").write_bytes(error_document("[root cause] OOM", worker="b"))
    (tmp_path / "error-c.pb").write_bytes(b"")
    reader = RemoteFileOutputReader(str(tmp_path))
    assert reader.is_error() is asyncio.run(reader.aio.is_error()) is True
    assert reader.read_all() == asyncio.run(reader.aio.read_all())
    assert reader.read_root_cause() == asyncio.run(reader.aio.read_root_cause())
    assert reader.read_error() == asyncio.run(reader.aio.read_error())
    assert reader.failures() == asyncio.run(reader.aio.failures())
    assert [f.worker for f in reader.failures()] == ["b", "a"]
    assert reader.exists() is asyncio.run(reader.aio.exists()) is True
    outputs, error = reader.read()
    assert error is None and outputs == asyncio.run(reader.aio.read())[0]
    assert outputs is not None and outputs.literals["o0"].scalar.primitive.integer == 7


def test_the_reader_is_its_settings_and_aio_reads_them(tmp_path: Path) -> None:
    reader = RemoteFileOutputReader(f"{tmp_path}/", max_concurrency=2)
    assert isinstance(reader, ReaderSettings) and reader.output_prefix == str(tmp_path)
    assert isinstance(reader.aio, AsyncRemoteFileOutputReader) and reader.aio.settings is reader
    with pytest.raises(ValueError, match="expected_workers must be at least 1"):
        RemoteFileOutputReader(str(tmp_path), expected_workers=0)


def test_sync_calls_work_and_raise_as_usual_inside_a_running_loop(tmp_path: Path) -> None:
    (tmp_path / "error-a.pb").write_bytes(error_document(worker="a"))
    (tmp_path / "outputs.pb").write_bytes(outputs_bytes(1) * 100)
    reader = RemoteFileOutputReader(str(tmp_path), max_payload_bytes=256)  # the error file fits

    async def inside_loop() -> list[str]:
        with pytest.raises(PayloadTooLargeError, match=r"^output file .*/outputs\.pb is too large: \d+ bytes"):
            reader.read()  # the error crosses from the reader's private thread as itself
        return [f.worker for f in reader.failures()]

    assert asyncio.run(inside_loop()) == ["a"]


def test_missing_outputs_is_an_outputs_error(tmp_path: Path) -> None:
    reader = RemoteFileOutputReader(str(tmp_path))
    assert reader.exists() is False
    with pytest.raises(OutputsError, match=rf"^outputs not found at {tmp_path}/outputs\.pb$"):
        reader.read()


def test_bad_files_on_a_local_store_are_skipped_with_reasons_never_raised(file_store: ObjectStore) -> None:
    prefix = file_store.new_prefix("bad")
    good = worker_file_name("good")
    files = {
        good: error_document("[root cause] real failure", worker="good"),
        "error-empty.pb": b"",
        "error-corrupt.pb": b"\x0a\xff\xff\xff\xff\x0f",
        "error-truncated.pb": error_document("[root cause] " + "t" * 100, worker="t")[:40],
        "error-oversized.pb": error_document("[root cause] " + "o" * 2000, worker="o", timestamp_ns=1),
        "error-no-content.pb": b"\x0a\x00",
    }
    write_files("file", {}, [(f"{prefix}/{name}", data) for name, data in files.items()])
    reader = RemoteFileOutputReader(prefix, storage_options=file_store.storage_options, max_payload_bytes=1024)
    result = reader.read_all()
    assert [f.worker for f in result.failures] == ["good"] and result.error_files == 6
    found = {Path(skip.error_uri).name: skip.reason for skip in result.skipped}
    assert set(found) == set(files) - {good}
    assert found["error-oversized.pb"].startswith("too large: ")
    no_content = "not a Flyte ErrorDocument: the ContainerError has neither a code nor a message"
    assert found["error-no-content.pb"] == no_content
    assert reader.read_error().execution_error.error_uri == f"{prefix}/{good}"


def test_only_bad_files_give_the_bad_format_error_not_an_exception(file_store: ObjectStore) -> None:
    prefix = file_store.new_prefix("all-bad")
    write_files("file", {}, [(f"{prefix}/error-{i}.pb", b"\xff" * i) for i in range(8)])
    reader = RemoteFileOutputReader(prefix)
    assert reader.is_error() is True and reader.failures() == []
    outcome = reader.read_error()
    assert outcome.execution_error.code == ERROR_FILE_BAD_FORMAT and outcome.is_recoverable
    assert outcome.execution_error.message.endswith("; and 3 more")


def test_many_files_read_one_at_a_time_are_all_accounted_for(tmp_path: Path) -> None:
    for index in range(120):
        data = b"" if index % 3 == 0 else error_document(worker=f"w{index:03d}", timestamp_ns=BASE_NS + index)
        (tmp_path / f"error-{index:03d}.pb").write_bytes(data)
    result = RemoteFileOutputReader(str(tmp_path), max_concurrency=1).read_all()
    assert (len(result.failures), len(result.skipped), result.error_files) == (80, 40, 120)
    assert result.root_cause is not None and result.root_cause.worker == "w001"
