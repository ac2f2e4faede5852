"""The pod's SIGTERM notice: installed in the pod's main process only, and given back to Python's
default (the noted SIGTERM delivered again) for a task that does not report root causes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rootcause_core.pod_stop import PodStopNotice


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=120)


def test_a_noted_sigterm_ends_the_process_as_python_would_once_released() -> None:
    done = _run("""
        import os, signal
        from rootcause_core.pod_stop import POD_STOP
        POD_STOP.install()
        os.kill(os.getpid(), signal.SIGTERM)   # noted while the task is not known yet
        assert POD_STOP.count == 1
        print("noted", flush=True)
        POD_STOP.release()                     # a plain task: Python's default, and the SIGTERM again
        print("still alive")
    """)
    assert done.returncode == -signal.SIGTERM, done
    assert "noted" in done.stdout and "still alive" not in done.stdout, done


def test_a_worker_forked_from_the_pods_main_process_ends_at_a_sigterm_even_after_the_pod_noted_one() -> None:
    """torch's ``fork`` start method: the worker inherits the handler; the agent's teardown SIGTERM
    must end it (as a plain process), not be noted in the worker's copy of the notice."""
    done = _run("""
        import os, signal, time
        from rootcause_core.pod_stop import POD_STOP
        POD_STOP.install()
        os.kill(os.getpid(), signal.SIGTERM)   # the pod noted one already: later ones are only counted
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.2)
        started = time.monotonic()
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        print(os.WIFSIGNALED(status) and os.WTERMSIG(status), round(time.monotonic() - started))
        assert POD_STOP.count == 1
    """)
    assert done.returncode == 0, done
    assert done.stdout.split() == [str(int(signal.SIGTERM)), "0"], done


def test_the_first_sigterm_is_acted_on_once_and_later_ones_only_counted() -> None:
    acted: list[int] = []
    notice = PodStopNotice()
    notice.on_first = acted.append
    notice(signal.SIGTERM, None)
    notice(signal.SIGTERM, None)
    assert acted == [signal.SIGTERM] and notice.count == 2 and notice.on_first is None


@pytest.mark.parametrize(("argv0", "installed"), [("a0", True), ("rootcause-a0", True), ("pytest", False)])
def test_the_flyte_2_task_module_notes_sigterm_in_a_pods_main_process_only(tmp_path: Path, argv0: str,
                                                                          installed: bool) -> None:
    """``a0`` loads the task before its inputs: the notice is installed then, and never in a user's
    process (``flyte run --local``, a notebook) nor in a worker that ``multiprocessing`` spawned."""
    script = tmp_path / "pod_main.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, signal, sys
        sys.argv[0] = sys.argv[1]
        import flyteplugins.rootcause.task
        from rootcause_core.pod_stop import POD_STOP

        def child(queue):
            queue.put(signal.getsignal(signal.SIGTERM) is POD_STOP)

        if __name__ == "__main__":
            print("main", signal.getsignal(signal.SIGTERM) is POD_STOP)
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            worker = context.Process(target=child, args=(queue,))
            worker.start()
            print("worker", queue.get(timeout=60))
            worker.join()
    """))
    done = subprocess.run([sys.executable, str(script), argv0], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"main {installed}" in done.stdout and "worker False" in done.stdout, done.stdout
