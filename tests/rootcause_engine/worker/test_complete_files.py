"""Writing a worker's file so that it only ever appears complete (``rootcause_engine/worker/complete_files.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootcause_engine.worker.complete_files import write_complete


def test_the_file_holds_the_text_and_no_temporary_is_left(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    write_complete(str(path), '{"message": "boom"}')
    assert path.read_text(encoding="utf-8") == '{"message": "boom"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.json"]


def test_non_ascii_text_is_written_as_utf_8(tmp_path: Path) -> None:
    path = tmp_path / "stacks.txt"
    write_complete(str(path), "rank 3 \N{EM DASH} stuck in all_reduce \N{SNOWMAN}")
    assert path.read_bytes() == "rank 3 \N{EM DASH} stuck in all_reduce \N{SNOWMAN}".encode()


def test_a_second_write_replaces_the_file_and_a_reader_of_the_first_keeps_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "collectives.json"
    write_complete(str(path), "first answer")
    with open(path, encoding="utf-8") as reader:
        write_complete(str(path), "second")
        assert reader.read() == "first answer"  # a rename: the open file is the old one, complete
    assert path.read_text(encoding="utf-8") == "second"


def test_a_file_that_cannot_be_written_only_warns(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "error.json"
    with pytest.warns(UserWarning, match=rf"Unable to write {path}: .*No such file or directory"):
        write_complete(str(path), "lost")
    assert not path.parent.exists()


def test_a_failed_rename_warns_and_leaves_the_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "error.json"
    target.mkdir()  # a directory where the file should go: the rename over it fails
    with pytest.warns(UserWarning, match="Unable to write"):
        write_complete(str(target), "text")
    assert target.is_dir() and list(target.iterdir()) == []
