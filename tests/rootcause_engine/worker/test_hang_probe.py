"""The worker's hang probe (``rootcause_engine/worker/hang_probe.py``): installed in a real subprocess, which
answers a real ``SIGUSR2`` with its stacks and collectives files and lives on; and where it refuses to install."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rootcause_engine.worker.hang_probe import (
    COLLECTIVES_FILE_NAME,
    PROBE_SIGNAL,
    READY_FILE_NAME,
    STACKS_FILE_NAME,
    install_hang_probe,
    probe_paths,
)

#: A bound on any wait here: the test fails past it, it is no speed claim.
NEVER_S = 60.0
STUCK_FILE_NAME = "stuck"

#: argv: the error file. torch is made unimportable (so the stand-in starts fast): the probe's
#: Flight Recorder read then finds no torch, which it must survive.
_STAND_IN = """
import os, sys, time
sys.modules["torch"] = None
from rootcause_engine.worker.hang_probe import install_hang_probe
first = install_hang_probe(sys.argv[1])
second = install_hang_probe(sys.argv[1])
print(first, second, flush=True)
def stuck_in_user_code():
    open(os.path.join(os.path.dirname(sys.argv[1]), "stuck"), "w").close()
    while True:
        time.sleep(3600)
stuck_in_user_code()
"""


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + NEVER_S
    while not path.exists():
        assert proc.poll() is None, f"the stand-in exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


@pytest.fixture
def stuck_worker(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A stand-in worker with the probe installed for ``tmp_path/error.json``, stuck in ``stuck_in_user_code``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _STAND_IN, str(tmp_path / "error.json")], stdout=subprocess.PIPE, text=True
    )
    try:
        _wait_for(tmp_path / STUCK_FILE_NAME, proc)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_probe_paths_lie_beside_the_error_file() -> None:
    assert probe_paths("/tmp/attempt_0/1") == (
        f"/tmp/attempt_0/1/{READY_FILE_NAME}",
        f"/tmp/attempt_0/1/{STACKS_FILE_NAME}",
        f"/tmp/attempt_0/1/{COLLECTIVES_FILE_NAME}",
    )


def test_an_installed_probe_marks_itself_ready_once_and_waits(
    stuck_worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    assert stuck_worker.stdout is not None
    assert stuck_worker.stdout.readline().split() == ["True", "False"]  # the second install is a no-op
    assert (tmp_path / READY_FILE_NAME).read_text(encoding="utf-8") == str(stuck_worker.pid)
    assert (tmp_path / STACKS_FILE_NAME).read_text(encoding="utf-8") == ""  # nothing asked yet
    assert not (tmp_path / COLLECTIVES_FILE_NAME).exists()


def test_the_probe_signal_is_answered_with_stacks_and_collectives_and_the_worker_lives_on(
    stuck_worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    sent_ns = time.time_ns()
    os.kill(stuck_worker.pid, PROBE_SIGNAL)
    _wait_for(tmp_path / COLLECTIVES_FILE_NAME, stuck_worker)  # written after the stacks (chained handler)
    stacks = (tmp_path / STACKS_FILE_NAME).read_text(encoding="utf-8")
    assert "stuck_in_user_code" in stacks and "most recent call first" in stacks
    answer = json.loads((tmp_path / COLLECTIVES_FILE_NAME).read_text(encoding="utf-8"))
    assert answer["pid"] == stuck_worker.pid
    assert answer["collectives"] == []  # no torch here: no Flight Recorder, no open send/recv
    assert answer["written_ns"] >= sent_ns
    assert stuck_worker.poll() is None  # answering never ends the worker
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [COLLECTIVES_FILE_NAME, READY_FILE_NAME, STACKS_FILE_NAME, STUCK_FILE_NAME]
    )  # no temporary left behind


@pytest.mark.parametrize("error_file", [None, ""])
def test_without_an_error_file_nothing_is_installed(error_file: str | None) -> None:
    before = signal.getsignal(PROBE_SIGNAL)
    assert install_hang_probe(error_file) is False
    assert signal.getsignal(PROBE_SIGNAL) is before


def test_a_probe_is_not_installed_off_the_main_thread(tmp_path: Path) -> None:
    before = signal.getsignal(PROBE_SIGNAL)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(install_hang_probe(str(tmp_path / "error.json"))))
    thread.start()
    thread.join()
    assert results == [False]
    assert list(tmp_path.iterdir()) == [] and signal.getsignal(PROBE_SIGNAL) is before


def test_a_probe_whose_folder_cannot_be_written_is_not_installed(tmp_path: Path) -> None:
    before = signal.getsignal(PROBE_SIGNAL)
    assert install_hang_probe(str(tmp_path / "missing" / "error.json")) is False
    assert signal.getsignal(PROBE_SIGNAL) is before and not (tmp_path / "missing").exists()
