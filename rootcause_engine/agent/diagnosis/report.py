"""Human-readable root-cause messages: one line naming the root cause, its traceback, the victims.

The first line starts with the role marker of ``rootcause_core.roles`` so that readers of the
error document (the backend reader, people) know whether this pod saw a root cause or only victims.

The report is the pod's ``ErrorDocument`` message, so it follows ``rootcause_core.safe_text``:
every text in it is escaped, a failure's line shows the head and tail of a huge first line, the
root cause's traceback keeps its innermost frames within ``MAX_REPORT_TRACEBACK_BYTES``, and the
whole report fits propeller's message limit (``MAX_REPORT_BYTES``), so propeller never cuts it.
"""

from __future__ import annotations

import textwrap

from rootcause_core.ordering import Role
from rootcause_core.roles import is_teardown_signal, role_marker
from rootcause_core.safe_text import (
    MAX_REPORT_BYTES,
    MAX_REPORT_TRACEBACK_BYTES,
    bounded_text,
    first_line,
    safe_line,
)
from rootcause_core.timestamps import rfc3339_ns, to_seconds
from rootcause_engine.agent.diagnosis.failures import WorkerFailure, signal_name

#: What a death by signal usually means on a training cluster, and what to check.
SIGNAL_HINTS: dict[str, str] = {
    "SIGKILL": "no error file: likely killed by the OOM killer or the node; check the pod's memory limit and events",
    "SIGABRT": "likely aborted by the NCCL watchdog (a collective timed out or failed, often because a peer "
    "died or hung first) or a C++ assertion; check the worker's stderr and NCCL logs (NCCL_DEBUG=INFO)",
    "SIGSEGV": "segmentation fault in native code (CUDA, a C extension); check the worker's stderr",
    "SIGBUS": "bus error: often /dev/shm too small for data loader workers; raise shared memory",
}

#: Exception class names that mean the GPU ran out of memory (in torch 2.13 ``torch.cuda.OutOfMemoryError`` is
#: ``torch.OutOfMemoryError``), and message fragments of older or native variants.
_GPU_OOM_TYPES = ("OutOfMemoryError",)
_GPU_OOM_MESSAGES = ("cuda out of memory", "cuda error: out of memory", "hip out of memory")
GPU_OOM_HINT = "out of GPU memory: reduce the batch size, enable activation checkpointing or shard the model"
HOST_OOM_HINT = "out of host memory: raise the pod's memory request/limit or reduce data loader workers"

#: Shells report a child killed by signal N as exit code 128 + N (binary entrypoints, wrapper scripts).
_SHELL_SIGNAL_BASE = 128


def oom_hint(exception_type: str | None, message: str) -> str | None:
    """The out-of-memory hint for a recorded exception, or ``None`` when it is not an OOM."""
    name = exception_type.rsplit(".", 1)[-1] if exception_type else ""
    lowered = message.lower()
    if name in _GPU_OOM_TYPES or any(fragment in lowered for fragment in _GPU_OOM_MESSAGES):
        return GPU_OOM_HINT
    if name == "MemoryError" or lowered.startswith("memoryerror"):
        return HOST_OOM_HINT
    return None


def _signal_of_shell_exit(exitcode: int) -> str | None:
    if _SHELL_SIGNAL_BASE < exitcode < _SHELL_SIGNAL_BASE + 65:
        name = signal_name(exitcode - _SHELL_SIGNAL_BASE)
        return name if name in SIGNAL_HINTS else None
    return None


def format_time(timestamp_ns: int | None) -> str:
    """RFC 3339 UTC with nanoseconds, or ``unknown time``."""
    if timestamp_ns is None:
        return "unknown time"
    return rfc3339_ns(timestamp_ns)


def describe_ending(failure: WorkerFailure) -> str:
    """How the worker ended: exception, signal or exit code, with what it likely means."""
    if failure.message:
        ending = first_line(failure.message)
        hint = oom_hint(failure.exception_type, failure.message)
        return ending + (f" ({hint})" if hint else "")
    if failure.signal_name:
        if failure.role == Role.VICTIM and is_teardown_signal(failure.signal_name):
            return f"killed by {failure.signal_name} (the agent's teardown after another worker failed)"
        hint = SIGNAL_HINTS.get(failure.signal_name)
        return f"killed by {failure.signal_name}" + (f" ({hint})" if hint else "")
    if failure.exitcode is not None:
        shell_signal = _signal_of_shell_exit(failure.exitcode)
        if shell_signal is not None:
            return (
                f"exited with code {failure.exitcode} (128 + {shell_signal}: a process it ran was killed by "
                f"{shell_signal}; {SIGNAL_HINTS[shell_signal]})"
            )
        return f"exited with code {failure.exitcode}"
    return "failed (no exit status or error file)"


def describe_worker(failure: WorkerFailure) -> str:
    """``rank 3 (local rank 1, group rank 1) on worker pod-1 (host h, pid 42)``."""
    rank = "rank ?" if failure.global_rank is None else f"rank {failure.global_rank}"
    local = "?" if failure.local_rank is None else str(failure.local_rank)
    group = "?" if failure.group_rank is None else str(failure.group_rank)
    where = safe_line(failure.worker) or "?"
    host = f"host {safe_line(failure.host)}, " if failure.host and failure.host != failure.worker else ""
    pid = "?" if failure.pid is None else str(failure.pid)
    status = ""
    if failure.signal_name:
        status = f", {failure.signal_name}"
    elif failure.exitcode is not None:
        status = f", exit code {failure.exitcode}"
    return f"{rank} (local rank {local}, group rank {group}) on worker {where} ({host}pid {pid}{status})"


def summary_line(failure: WorkerFailure) -> str:
    """The first line of the message: role marker, who, when (and how it was known), what."""
    when = f"{format_time(failure.timestamp_ns)} ({failure.time_source.value})"
    return f"{role_marker(failure.role)} {describe_worker(failure)} failed at {when}: {describe_ending(failure)}"


def format_agent_timeline(root_ns: int | None, noticed_ns: int | None, ended_ns: int | None, reported_ns: int) -> str:
    """One line: how long after the root cause this pod's agent noticed, ended its survivors, reported.

    It tells a user where a slow failure went (detection, teardown or the report) without the pod
    log; offsets are from the root cause's time, so they read the same in every pod's document.
    """
    steps = [("noticed the failure", noticed_ns), ("survivors ended", ended_ns), ("reported", reported_ns)]
    if root_ns is None:
        return "Agent timeline: unknown (the root cause has no time)"
    parts = [f"{name} {to_seconds(moment - root_ns):+.3f} s" for name, moment in steps if moment is not None]
    return "Agent timeline (after the root cause): " + ", ".join(parts)


def format_root_cause_message(failures: list[WorkerFailure]) -> str:
    """Full message: summary of the root cause, its traceback, then one line per other failure."""
    if not failures:
        raise ValueError("no failures to report")
    root, others = failures[0], failures[1:]
    lines = [summary_line(root)]
    if root.role == Role.VICTIM:
        lines.append(
            "Only victims failed in this pod: a peer (another pod or node) failed first; "
            "look for the root cause in the other workers' errors."
        )
    if root.traceback.strip():
        traceback = bounded_text(root.traceback.rstrip(), MAX_REPORT_TRACEBACK_BYTES)
        lines += ["", "Traceback of the root cause:", textwrap.indent(traceback, "  ")]
    if others:
        lines += ["", f"Other failures ({len(others)}):"]
        for failure in others:
            delta = ""
            if failure.timestamp_ns is not None and root.timestamp_ns is not None:
                delta = f" {to_seconds(failure.timestamp_ns - root.timestamp_ns):+.3f} s"
            lines.append(
                f"  - {failure.role.value}: {describe_worker(failure)}{delta}: {describe_ending(failure)}"
            )
    return bounded_text("\n".join(lines), MAX_REPORT_BYTES)
