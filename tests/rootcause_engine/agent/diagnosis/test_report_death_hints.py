"""Infrastructure deaths named in the root-cause message: OOM kills, NCCL aborts, GPU/host OOM."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from rootcause_core.ordering import Role
from rootcause_engine.agent.diagnosis.report import GPU_OOM_HINT, HOST_OOM_HINT, describe_ending, oom_hint
from rootcause_engine.worker.recorder import build_error_file, parse_error_file
from tests.worker_failures import worker_failure


def test_sigkill_without_an_error_file_is_a_likely_oom_kill() -> None:
    ending = describe_ending(worker_failure(signal_number=int(signal.SIGKILL)))
    assert ending.startswith("killed by SIGKILL (no error file: likely killed by the OOM killer")
    assert "memory limit" in ending


def test_sigkill_by_our_own_teardown_is_not_called_an_oom() -> None:
    ending = describe_ending(worker_failure(signal_number=int(signal.SIGKILL), role=Role.VICTIM))
    assert ending == "killed by SIGKILL (the agent's teardown after another worker failed)"


def test_sigabrt_is_a_likely_nccl_watchdog_abort() -> None:
    ending = describe_ending(worker_failure(signal_number=int(signal.SIGABRT)))
    assert "likely aborted by the NCCL watchdog" in ending and "NCCL_DEBUG=INFO" in ending


@pytest.mark.parametrize(("exitcode", "name"), [(137, "SIGKILL"), (134, "SIGABRT")])
def test_a_shells_128_plus_signal_exit_code_gets_the_signals_hint(exitcode: int, name: str) -> None:
    ending = describe_ending(worker_failure(exitcode=exitcode))
    assert ending.startswith(f"exited with code {exitcode} (128 + {name}: a process it ran was killed by {name}")


def test_plain_exit_codes_get_no_hint() -> None:
    assert describe_ending(worker_failure(exitcode=1)) == "exited with code 1"
    assert describe_ending(worker_failure(exitcode=200)) == "exited with code 200"


def test_torch_cuda_out_of_memory_error_recorded_by_a_worker_is_an_oom() -> None:
    """The real exception class, through the recorder's error file, as the agent reads it."""
    exc = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    recorded = parse_error_file(json.dumps(build_error_file(exc, 1)))
    failure = worker_failure(exitcode=1, message=recorded.message, exception_type=recorded.exception_type)
    ending = describe_ending(failure)
    assert ending == f"OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB ({GPU_OOM_HINT})"


def test_oom_from_older_or_native_code_is_recognised_by_its_message() -> None:
    assert oom_hint("builtins.RuntimeError", "RuntimeError: CUDA out of memory. Tried to allocate") == GPU_OOM_HINT
    assert oom_hint("builtins.RuntimeError", "CUDA error: out of memory") == GPU_OOM_HINT
    assert oom_hint("builtins.MemoryError", "MemoryError: ") == HOST_OOM_HINT
    assert oom_hint("builtins.ValueError", "bad batch") is None
    assert oom_hint(None, "") is None
