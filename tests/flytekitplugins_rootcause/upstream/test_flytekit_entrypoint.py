"""``flytekitplugins_rootcause.upstream.flytekit_entrypoint``: the container args' entrypoint swap, and each of its
swaps of ``flytekit.bin.entrypoint`` names for one block, with flytekit's own functions still reachable (no process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flytekit.bin.entrypoint as flytekit_entrypoint
import pytest
from flytekit.core.data_persistence import FileAccessProvider

from flytekitplugins_rootcause.upstream.flytekit_entrypoint import (
    ERROR_DOCUMENT_HOOKS,
    FLYTEKIT_ENTRYPOINT,
    PATCHED_ENTRYPOINT,
    SYMBOLS,
    RunsPatchedEntrypoint,
    container_error_timestamp,
    dispatch_execute_replaced,
    error_document_hooks,
    flytekit_execute_command,
    get_one_of,
    put_data_replaced,
    traceback_str,
    with_patched_entrypoint,
)

FLYTEKIT_ARGS = ["pyflyte-execute", "--inputs", "{{.input}}", "--output-prefix", "{{.outputPrefix}}"]


def test_the_entrypoint_is_swapped_where_it_stands_and_nothing_else_changes() -> None:
    assert (FLYTEKIT_ENTRYPOINT, PATCHED_ENTRYPOINT) == ("pyflyte-execute", "pyflyte-rootcause-execute")
    assert with_patched_entrypoint(FLYTEKIT_ARGS) == ["pyflyte-rootcause-execute", *FLYTEKIT_ARGS[1:]]
    fast = ["pyflyte-fast-execute", "--additional-distribution", "s3://b/x.tar.gz", "--", *FLYTEKIT_ARGS]
    assert with_patched_entrypoint(fast) == [*fast[:4], "pyflyte-rootcause-execute", *FLYTEKIT_ARGS[1:]]
    assert with_patched_entrypoint(["pyflyte-map-execute", "--inputs", "pyflyte-execute-x"]) == [
        "pyflyte-map-execute", "--inputs", "pyflyte-execute-x"]  # only the whole word is flytekit's entrypoint
    patched = with_patched_entrypoint(FLYTEKIT_ARGS)
    assert with_patched_entrypoint(patched) == patched and FLYTEKIT_ARGS[0] == "pyflyte-execute"  # a new list


def test_a_task_class_with_the_mixin_runs_the_patched_entrypoint() -> None:
    class FlytekitTask:
        def get_default_command(self, settings: Any) -> list[str]:
            return list(FLYTEKIT_ARGS)

    class OurTask(RunsPatchedEntrypoint, FlytekitTask):
        pass

    assert OurTask().get_default_command(settings=None)[0] == "pyflyte-rootcause-execute"
    assert FlytekitTask().get_default_command(settings=None)[0] == "pyflyte-execute"


def test_the_hooks_are_the_module_globals_the_seam_declares() -> None:
    declared = {symbol.path for symbol in SYMBOLS if symbol.module == "flytekit.bin.entrypoint"}
    assert set(ERROR_DOCUMENT_HOOKS) <= declared
    assert all(callable(getattr(flytekit_entrypoint, name)) for name in ERROR_DOCUMENT_HOOKS)


def test_dispatch_execute_is_replaced_for_the_block_only_and_the_command_stays_flytekit_s() -> None:
    own = flytekit_entrypoint._dispatch_execute

    def ours(*args: Any) -> None:
        raise AssertionError("not called here")

    with dispatch_execute_replaced(ours):
        assert flytekit_entrypoint._dispatch_execute is ours
        assert flytekit_execute_command() is flytekit_entrypoint.execute_task_cmd
    assert flytekit_entrypoint._dispatch_execute is own


def test_the_error_document_hooks_are_swapped_in_order_and_flytekit_s_own_still_answer() -> None:
    own = {name: getattr(flytekit_entrypoint, name) for name in ERROR_DOCUMENT_HOOKS}
    error = ValueError("the user's error")
    hooks = {"error_file_name": lambda: "error-pod-1.pb", "worker_name": lambda: "pod-1",
             "error_timestamp": lambda e=None: "stamp", "error_message": lambda e: "[root cause] report"}
    with error_document_hooks(**hooks):
        assert [getattr(flytekit_entrypoint, name)() if name in ERROR_DOCUMENT_HOOKS[:3]
                else getattr(flytekit_entrypoint, name)(error) for name in ERROR_DOCUMENT_HOOKS] == [
            "error-pod-1.pb", "pod-1", "stamp", "[root cause] report"]
        # what the replacements call to fall back on: flytekit's own text and time, not themselves
        assert "ValueError: the user's error" in traceback_str(error)
        assert container_error_timestamp(error).seconds > 0
    assert {name: getattr(flytekit_entrypoint, name) for name in ERROR_DOCUMENT_HOOKS} == own


def test_the_error_document_hooks_are_put_back_when_the_task_raises() -> None:
    own = flytekit_entrypoint.get_traceback_str
    with pytest.raises(KeyError), error_document_hooks(error_file_name=str, worker_name=str,
                                                       error_timestamp=str, error_message=str):
        raise KeyError("the run failed")
    assert flytekit_entrypoint.get_traceback_str is own


def test_put_data_is_replaced_on_the_run_s_provider_only(tmp_path: Path) -> None:
    run, other = (FileAccessProvider(str(tmp_path / name), str(tmp_path / "raw")) for name in ("run", "other"))
    calls: list[tuple[str, str]] = []

    def put_data(local_path: str, remote_path: str, is_multipart: bool = False, **kwargs: Any) -> str:
        calls.append((local_path, remote_path))
        return remote_path

    with put_data_replaced(run, put_data):
        assert run.put_data("/engine/dir", "s3://bucket/out", is_multipart=True) == "s3://bucket/out"
        assert other.put_data is not put_data
    assert calls == [("/engine/dir", "s3://bucket/out")]
    assert "put_data" not in vars(run)  # the class's method shows through again
    assert run.put_data.__func__ is FileAccessProvider.put_data


def test_get_one_of_answers_the_first_variable_that_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOTCAUSE_TEST_B", "b")
    monkeypatch.setenv("ROOTCAUSE_TEST_C", "c")
    monkeypatch.delenv("ROOTCAUSE_TEST_A", raising=False)
    assert get_one_of("ROOTCAUSE_TEST_A", "ROOTCAUSE_TEST_C", "ROOTCAUSE_TEST_B") == "c"
    assert get_one_of("ROOTCAUSE_TEST_A") == ""
