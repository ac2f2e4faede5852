"""The ``rootcause-a0`` console script (``flyteplugins/rootcause/runtime.py``) and the args that name it.

What a pod stopped while it starts gets from it is tested at the operator's decision
(``tests/scenarios/test_operator_decision.py``); here, what makes that possible: nothing heavy is
imported before the notice is installed, and only flyte's own runtime command is replaced.
"""

from __future__ import annotations

import subprocess
import sys

from flyteplugins.rootcause.upstream import ROOTCAUSE_RUNTIME_SCRIPT, RUNTIME_SCRIPT, run_by_rootcause_runtime


def test_the_script_s_module_and_the_package_import_neither_torch_nor_flyte() -> None:
    """A SIGTERM during torch's or flyte's import (seconds on a cold node) must find the notice installed."""
    code = (
        "import sys, flyteplugins.rootcause, flyteplugins.rootcause.runtime\n"
        "print(sorted(name for name in ('torch', 'flyte', 'flyteplugins.pytorch') if name in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_only_flyte_s_a0_is_run_by_the_script_and_every_other_arg_is_kept() -> None:
    args = [RUNTIME_SCRIPT, "--inputs", "{{.input}}", "--resolver", "r", "a0"]
    assert run_by_rootcause_runtime(args) == [ROOTCAUSE_RUNTIME_SCRIPT, *args[1:]]
    assert run_by_rootcause_runtime(["clustered", "--inputs", "x"]) == ["clustered", "--inputs", "x"]
    assert run_by_rootcause_runtime([]) == []
