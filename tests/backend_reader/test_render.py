"""The reader's output formats (``backend_reader.render``): the documented JSON shape, the serialized
``ExecutionError`` and the table for people, whose cells never carry markup or control sequences."""

from __future__ import annotations

import io

import pytest
from flyteidl.core import execution_pb2
from rich.console import Console

from backend_reader.documents import SkippedFile
from backend_reader.render import (
    ROOT_CAUSE_ROLE,
    failure_role,
    print_table,
    table_console,
    to_json_dict,
    to_proto_bytes,
)
from backend_reader.results import ERROR_FILE_BAD_FORMAT, ReadResult
from testbed.reader_support import error_document
from tests.backend_reader.made_records import PREFIX, collect, record, sample


def table_text(result: ReadResult) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None)
    print_table(result, console)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def test_json_shape() -> None:
    result = collect([*sample(), SkippedFile(f"{PREFIX}/error-x.pb", "empty file")])
    shape = to_json_dict(result)
    assert set(shape) == {"is_error", "error", "failures", "skipped"}
    assert shape["is_error"] is True
    assert set(shape["error"]) == {"code", "message", "kind", "worker", "timestamp", "error_uri", "is_recoverable"}
    assert shape["error"]["timestamp"] == "2026-09-21T14:13:20.000000000Z"
    assert shape["error"]["kind"] == "USER"
    keys = {"worker", "timestamp", "code", "kind", "is_recoverable", "role", "error_uri"}
    assert all(set(failure) == keys for failure in shape["failures"])
    assert [f["role"] for f in shape["failures"]] == ["root-cause", "candidate", "candidate", "candidate", "victim"]
    assert shape["failures"][3]["timestamp"] is None
    assert shape["skipped"] == [{"error_uri": f"{PREFIX}/error-x.pb", "reason": "empty file"}]
    assert to_json_dict(collect([])) == {"is_error": False, "error": None, "failures": [], "skipped": []}


def test_json_of_unusable_files_is_the_made_up_error_without_a_time() -> None:
    shape = to_json_dict(collect([SkippedFile(f"{PREFIX}/error-x.pb", "empty file")]))
    error = shape["error"]
    assert (error["code"], error["kind"], error["is_recoverable"]) == (ERROR_FILE_BAD_FORMAT, "SYSTEM", True)
    assert (error["timestamp"], error["worker"], error["error_uri"]) == (None, "", "")
    assert shape["failures"] == []


def test_the_root_causes_role_is_root_cause_and_the_others_keep_their_own() -> None:
    result = collect(sample())
    assert failure_role(result, 0) == ROOT_CAUSE_ROLE == "root-cause"
    assert [failure_role(result, index) for index in range(1, 5)] == ["candidate", "candidate", "candidate", "victim"]


def test_proto_bytes_are_the_deterministic_execution_error_or_nothing() -> None:
    assert to_proto_bytes(collect([])) == b""
    result = collect(sample())
    data = to_proto_bytes(result)
    parsed = execution_pb2.ExecutionError.FromString(data)
    assert (parsed.worker, parsed.error_uri) == ("a", f"{PREFIX}/error-a-1.pb")
    assert data == to_proto_bytes(collect(list(reversed(sample()))))  # same bytes whatever the read order


def test_the_table_marks_the_root_cause_lists_skipped_files_and_ends_with_the_verdict() -> None:
    output = table_text(collect([*sample(), SkippedFile(f"{PREFIX}/error-x.pb", "empty file")]))
    lines = output.splitlines()
    assert f"Failures under {PREFIX} (root cause first)" in output
    root_row = next(line for line in lines if "★ root cause" in line)
    assert "error-a-1.pb" in root_row and "2026-09-21T14:13:20.000000000Z" in root_row and "+0.0 ms" in root_row
    assert "[root cause] OOM" in root_row  # a message is text, not rich markup that would swallow "[root cause]"
    assert "Skipped error files" in output and "empty file" in output
    assert lines[-1] == f"Task error: USER:RuntimeError from a ({PREFIX}/error-a-1.pb)"
    untimed = next(line for line in lines if "error-old.pb" in line)
    assert "unknown" in untimed  # no time: no place on the axis either


def test_the_table_of_a_task_that_did_not_fail_says_so() -> None:
    assert table_text(collect([])) == f"No error files under {PREFIX}: the task did not fail.\n"


def test_the_table_of_unusable_files_has_no_failures_and_names_the_made_up_error() -> None:
    output = table_text(collect([SkippedFile(f"{PREFIX}/error-x.pb", "not a protobuf ErrorDocument")]))
    assert "Failures under" not in output and "not a protobuf ErrorDocument" in output
    assert output.splitlines()[-1] == f"Task error: {ERROR_FILE_BAD_FORMAT} from unknown worker (no file)"


def test_hostile_strings_reach_the_terminal_escaped_and_as_plain_text() -> None:
    hostile = record(
        "error-h.pb",
        error_document("[root cause] \x1b]0;pwned\x07 [bold red]fake[/] markup", worker="w\x1b[2J", code="c[/x]"),
    )
    output = table_text(collect([hostile, SkippedFile(f"{PREFIX}/error-\x1b[31m.pb", "why \x1b[0m")]))
    assert "\x1b" not in output and "\x07" not in output
    assert "[bold red]fake[/] markup" in output  # shown as written, not read as rich markup
    assert "\\x1b" in output


def test_the_message_column_shows_the_first_line_cut_to_120_characters() -> None:
    long = "[root cause] rank 3 (local 0) on worker w (pid 9) failed at 2026-01-01T00:00:00Z (recorded): " + "v" * 300
    output = table_text(collect([record("error-l.pb", error_document(long + "\nsecond line", worker="w"))]))
    row = next(line for line in output.splitlines() if "★ root cause" in line)
    assert "v" * 119 + "…" in row and "v" * 120 not in row
    assert "second line" not in output and "failed at" not in row


@pytest.mark.parametrize(("is_tty", "width"), [(False, 200), (True, 77)])
def test_the_console_is_wide_for_pipes_and_the_terminals_width_otherwise(
    is_tty: bool, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Stdout(io.StringIO):
        def isatty(self) -> bool:
            return is_tty

    monkeypatch.setattr("sys.stdout", Stdout())
    monkeypatch.setenv("COLUMNS", "77")
    assert table_console().width == width
