"""How this plugin's task classes change what kfpytorch's elastic task runs in its workers.

``PytorchElasticFunctionTask._execute`` (which both task classes extend and call) ships
``self._task_function`` to every worker: cloudpickled for the ``spawn`` start method, called from
a closure for ``fork``. Swapping that attribute on the task instance for the launch, and only for
the launch, makes the workers run something else (the recording wrapper, the straggler check)
while the task object (name, interface, resolver) stays what flytekit registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rootcause_engine.upstream.patching import patched
from rootcause_engine.upstream.versions import Symbol, require

_TASK = "flytekitplugins.kfpytorch.task"

SYMBOLS: tuple[Symbol, ...] = (
    Symbol(
        "flytekitplugins-kfpytorch",
        _TASK,
        "PytorchElasticFunctionTask._execute",
        "extends (both task classes call it), to launch the workers",
    ),
    Symbol(
        "flytekitplugins-kfpytorch",
        _TASK,
        "PytorchElasticFunctionTask._task_function",
        "replaces on the task for a launch: _execute ships it to the workers",
        instance_attribute=True,
    ),
)


@contextlib.contextmanager
def task_function_swapped(task: Any, function: Callable[..., Any]) -> Iterator[None]:
    """For the block, kfpytorch's ``_execute`` of ``task`` runs ``function`` in the workers.

    The task's own function is restored whether the launch returns or raises; read it beforehand
    with flytekit's public ``task.task_function``.
    """
    require(SYMBOLS)
    with patched(task, _task_function=function):
        yield
