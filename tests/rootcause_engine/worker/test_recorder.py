"""The worker's error file: torch-compatible layout plus namespaced fields; robust parsing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from flytekit.exceptions.user import FlyteRecoverableException
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from rootcause_engine.worker.recorder import (
    NAMESPACE,
    TORCH_SHADOW_FILE_NAME,
    RecordingTaskFunction,
    parse_error_file,
    read_error_file,
)


@pytest.fixture()
def error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "attempt_0" / "1" / "error.json"
    path.parent.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("GROUP_RANK", "2")
    monkeypatch.setenv("FLYTE_INTERNAL_WORKER_NAME", "train-worker-2")
    return path


def _fail(exc: BaseException) -> None:
    raise exc


def test_recorder_writes_ns_time_and_identity_and_redirects_torch(error_file: Path) -> None:
    with pytest.raises(ValueError):
        RecordingTaskFunction(lambda: _fail(ValueError("bad batch")))()
    data = json.loads(error_file.read_text())
    ours = data[NAMESPACE]
    assert data["message"]["message"] == "ValueError: bad batch"
    assert int(data["message"]["extraInfo"]["timestamp"]) == ours["timestamp_ns"] // 1_000_000_000
    assert (ours["rank"], ours["local_rank"], ours["group_rank"]) == (5, 1, 2)
    assert ours["worker"] == "train-worker-2" and ours["pid"] == os.getpid() and ours["recoverable"] is False
    # torch's outer `record` now writes next to it, not over it
    assert os.environ["TORCHELASTIC_ERROR_FILE"] == str(error_file.parent / TORCH_SHADOW_FILE_NAME)
    torch_view = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert torch_view.message["message"] == "ValueError: bad batch"


def test_recoverable_flag_and_subclass_mro(error_file: Path) -> None:
    class SpotLost(FlyteRecoverableException):
        pass

    with pytest.raises(SpotLost):
        RecordingTaskFunction(lambda: _fail(SpotLost("preempted")))()
    record = read_error_file(str(error_file))
    assert record is not None and record.recoverable
    assert "FlyteRecoverableException" in record.exception_mro


def test_clean_sys_exit_is_not_a_failure(error_file: Path) -> None:
    with pytest.raises(SystemExit):
        RecordingTaskFunction(lambda: _fail(SystemExit(0)))()
    assert not error_file.exists()
    with pytest.raises(SystemExit):
        RecordingTaskFunction(lambda: _fail(SystemExit(3)))()
    assert "SystemExit: 3" in error_file.read_text()


def test_success_passes_the_value_and_kwargs_through(error_file: Path) -> None:
    assert RecordingTaskFunction(lambda x, y: x + y)(x=1, y=2) == 3
    assert not error_file.exists()


def test_torch_only_file_parses_without_a_precise_time() -> None:
    torch_file = {"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}}}
    record = parse_error_file(json.dumps(torch_file))
    assert (record.message, record.traceback, record.timestamp_ns, record.global_rank) == ("ValueError: x", "tb",
                                                                                          None, None)
    assert parse_error_file(json.dumps({"message": "plain text", "timestamp": 3})).message == "plain text"


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00\xff\xfe", b"{not json", b"[1, 2]", b'{"other": 1}', b'{"message": 12}',
     json.dumps({"message": {"message": "m"}, NAMESPACE: {"timestamp_ns": "soon", "rank": True}}).encode()],
)
def test_bad_files_become_a_readable_failure_not_a_crash(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "error.json"
    path.write_bytes(content)
    record = read_error_file(str(path))
    assert record is not None
    assert record.timestamp_ns is None and record.global_rank is None


def test_missing_and_oversized_files(tmp_path: Path) -> None:
    assert read_error_file(str(tmp_path / "absent.json")) is None
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    record = read_error_file(str(big), max_bytes=1024)
    assert record is not None and "larger than 1024 bytes" in record.message


class _Unprintable(ValueError):
    def __str__(self) -> str:
        raise RuntimeError("broken __str__")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ValueError("bad record \x00\x07\x08 end"), "ValueError: bad record \\x00\\x07\\x08 end"),
        (FileNotFoundError("no such file: data-\udc80.bin"), "FileNotFoundError: no such file: data-\\udc80.bin"),
        (_Unprintable(), "_Unprintable: <_Unprintable.__str__ raised RuntimeError>"),
    ],
)
def test_hostile_messages_are_recorded_escaped(error_file: Path, exc: BaseException, expected: str) -> None:
    with pytest.raises(type(exc)):
        RecordingTaskFunction(lambda: _fail(exc))()
    error_file.read_text(encoding="ascii")  # torch's layout, JSON with every non-ASCII character escaped
    record = read_error_file(str(error_file))
    assert record is not None and record.message == expected
    assert record.traceback.rstrip().endswith(expected) or "_Unprintable" in record.traceback


def test_a_huge_message_keeps_head_tail_and_traceback_under_the_read_limit(error_file: Path) -> None:
    message = "HEAD" + "x" * (5 * 1024 * 1024) + "TAIL"
    with pytest.raises(ValueError):
        RecordingTaskFunction(lambda: _fail(ValueError(message)))()
    assert error_file.stat().st_size < 4 * 1024 * 1024
    torch_view = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert torch_view.message["message"].startswith("ValueError: HEAD")
    record = read_error_file(str(error_file))
    assert record is not None and record.timestamp_ns is not None and record.global_rank == 5
    assert record.message.startswith("ValueError: HEAD") and record.message.endswith("TAIL")
    assert "in _fail" in record.traceback and record.traceback.rstrip().endswith("TAIL")


def test_non_utf8_bytes_in_a_file_are_escaped_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_bytes(b'{"message": {"message": "ValueError: caf\xe9", "extraInfo": {"timestamp": "1"}}}')
    record = read_error_file(str(path))
    assert record is not None and record.message == "ValueError: caf\\udce9"
