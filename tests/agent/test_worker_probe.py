"""Probing live workers: real processes with the worker's probe installed answer with their stacks.

Every child is told to exit afterwards; no assertion depends on how fast the machine is (the probe's
own wait is a bound, not a speed claim, and the slowest answer here is a C loop's stacks, which
come from the signal handler itself).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rootcause_engine.agent.worker_probe import probe_workers
from rootcause_engine.worker.hang_probe import READY_FILE_NAME

NEVER_S = 120.0

#: A worker stand-in: installs the probe for ``argv[1]`` (its error file), then runs ``argv[2]``.
CHILD = """
import sys, time
import torch  # as in a worker: the probe's Flight Recorder dump needs it loaded
from rootcause_engine.worker.hang_probe import install_hang_probe
assert install_hang_probe(sys.argv[1])
def stuck_in_user_code():
    while True:
        time.sleep(3600)
def stuck_in_native_code():
    sum(range(10**13))  # one C call: no Python signal handler runs until it returns
{"sleep": stuck_in_user_code, "native": stuck_in_native_code}[sys.argv[2]]()
"""


def _start(tmp_path: Path, name: str, mode: str) -> tuple[subprocess.Popen[bytes], str]:
    error_dir = tmp_path / name
    error_dir.mkdir()
    error_file = str(error_dir / "error.json")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, error_file, mode])
    deadline = time.monotonic() + NEVER_S
    while not (error_dir / READY_FILE_NAME).exists():
        assert proc.poll() is None, "the child died before installing the probe"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, error_file


def test_a_worker_in_user_code_answers_with_its_stack_and_its_collectives(tmp_path: Path) -> None:
    proc, error_file = _start(tmp_path, "sleeping", "sleep")
    try:
        answers = probe_workers([(proc.pid, error_file)], wait_s=NEVER_S)
        answer = answers[proc.pid]
        assert "in stuck_in_user_code" in answer.stacks
        assert answer.collectives == ()  # it answered from Python; no process group, so no collective
        assert not answer.in_collective
        assert proc.poll() is None  # the probe does not end the worker
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_stuck_in_native_code_still_gives_its_stack(tmp_path: Path) -> None:
    proc, error_file = _start(tmp_path, "native", "native")
    try:
        answer = probe_workers([(proc.pid, error_file)], wait_s=NEVER_S)[proc.pid]
        assert "in stuck_in_native_code" in answer.stacks
        assert answer.collectives is None  # its Python handler could not run
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_without_the_probe_is_not_signalled(tmp_path: Path) -> None:
    error_dir = tmp_path / "plain"
    error_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        assert probe_workers([(proc.pid, str(error_dir / "error.json"))], wait_s=0.1) == {}
        time.sleep(0.2)
        assert proc.poll() is None  # SIGUSR2's default action would have killed it
    finally:
        proc.kill()
        proc.wait()
    assert not os.listdir(error_dir)
