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
from tests.rootcause_engine.agent.probed_workers import NEVER_S, start_probed_worker


def _start(tmp_path: Path, name: str, mode: str) -> tuple[subprocess.Popen[bytes], str]:
    error_dir = tmp_path / name
    error_dir.mkdir()
    return start_probed_worker(error_dir, mode, with_torch=True), str(error_dir / "error.json")


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
