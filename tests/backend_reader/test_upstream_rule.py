"""The port of Flyte's Go ``Earliest`` rule (``backend_reader.upstream_rule``), on a local folder."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from flyteidl.core import errors_pb2, execution_pb2

from backend_reader.upstream_rule import ERROR_FILE_BAD_FORMAT, UpstreamReadError, earliest_error, list_error_files
from testbed.reader_support import BASE_NS, error_document


def _write(folder: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return str(folder)


def test_strictly_earliest_wins_and_ties_stay_with_the_first_listed(tmp_path: Path) -> None:
    folder = _write(tmp_path, {
        "error-b.pb": error_document("b", worker="b", timestamp_ns=BASE_NS),
        "error-a.pb": error_document("a", worker="a", timestamp_ns=BASE_NS),
        "error-c.pb": error_document("c", worker="c", timestamp_ns=BASE_NS + 1),
        "error-0.json": b"ignored: not .pb",
        "outputs.pb": b"ignored: not error*",
    })
    pick = earliest_error(folder)
    assert pick is not None and pick.worker == "a" and pick.error_path.endswith("error-a.pb")
    assert pick.execution_error().timestamp.seconds == BASE_NS // 1_000_000_000
    assert [Path(p).name for p in list_error_files(fsspec.filesystem("file"), folder)] == [
        "error-a.pb", "error-b.pb", "error-c.pb"]


def test_a_missing_timestamp_counts_as_1970_and_wins(tmp_path: Path) -> None:
    folder = _write(tmp_path, {
        "error-early.pb": error_document("early", worker="early", timestamp_ns=BASE_NS),
        "error-untimed.pb": error_document("old writer", worker="untimed", timestamp_ns=None, recoverable=True),
    })
    pick = earliest_error(folder)
    assert pick is not None and pick.worker == "untimed" and pick.timestamp_ns == 0 and pick.is_recoverable
    assert not pick.execution_error().HasField("timestamp")


def test_a_document_without_an_error_becomes_bad_format(tmp_path: Path) -> None:
    folder = _write(tmp_path, {"error.pb": errors_pb2.ErrorDocument().SerializeToString()})
    pick = earliest_error(folder)
    assert pick is not None and pick.code == ERROR_FILE_BAD_FORMAT
    assert pick.kind == execution_pb2.ExecutionError.SYSTEM and pick.is_recoverable


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe garbage", "not an ErrorDocument"),
        (error_document("ab").replace(b"ab", b"\xff\xfe"), "not an ErrorDocument"),  # not UTF-8
        (error_document("x" * 3000), "too large"),
    ],
)
def test_one_unreadable_file_fails_the_whole_read(tmp_path: Path, data: bytes, reason: str) -> None:
    folder = _write(tmp_path, {"error-good.pb": error_document("fine"), "error-bad.pb": data})
    with pytest.raises(UpstreamReadError, match=reason) as raised:
        earliest_error(folder, max_payload_bytes=2048)
    assert raised.value.path.endswith("error-bad.pb")


def test_no_error_files_means_no_error(tmp_path: Path) -> None:
    assert earliest_error(str(tmp_path)) is None
    assert earliest_error(str(tmp_path / "absent")) is None
