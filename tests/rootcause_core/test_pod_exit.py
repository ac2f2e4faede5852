"""Ending a pod's main process without interpreter teardown (``rootcause_core.pod_exit``), in real
subprocesses: the exit code is kept, buffered output and logs are flushed, atexit hooks do not run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_child(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (after the imports every child needs) in a fresh interpreter, output piped (so buffered)."""
    script = tmp_path / "child.py"
    script.write_text("import atexit, logging, sys\nfrom rootcause_core.pod_exit import exit_without_teardown\n"
                      + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)


def test_the_code_is_the_exit_status_and_output_and_logs_are_flushed_but_atexit_hooks_skipped(tmp_path: Path) -> None:
    log_file = tmp_path / "pod.log"
    done = run_child(
        f"""
        logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)
        atexit.register(lambda: print("atexit hook ran", flush=True))
        print("outputs written", end="")  # piped stdout is block-buffered: still in the buffer here
        sys.stderr.write("a warning without newline")
        logging.getLogger("pod").info("document stored")
        exit_without_teardown(7)
        print("after exit")
        """,
        tmp_path,
    )
    assert done.returncode == 7
    assert done.stdout == "outputs written"
    assert done.stderr == "a warning without newline"
    assert log_file.read_text() == "INFO:pod:document stored\n"


def test_a_stream_whose_flush_raises_does_not_stop_the_exit(tmp_path: Path) -> None:
    done = run_child(
        """
        class BrokenPipe:
            def write(self, text):
                return len(text)

            def flush(self):
                raise BrokenPipeError("the log collector went away")

        sys.stdout = BrokenPipe()
        sys.stderr.write("stderr is still flushed")
        exit_without_teardown(3)
        """,
        tmp_path,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "", "stderr is still flushed")


def test_a_signal_style_code_is_passed_through(tmp_path: Path) -> None:
    done = run_child("exit_without_teardown(143)\n", tmp_path)
    assert done.returncode == 143 and done.stdout == "" and done.stderr == ""
