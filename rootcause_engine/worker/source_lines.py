"""Keep the source lines in a spawned worker's traceback.

kfpytorch ships the user's task function to ``spawn`` workers with cloudpickle. The function is
pickled *by value* (the module attribute of that name is flytekit's task object, not the function),
and cloudpickle 3.1.3 and later replace every pickled code object's file name with the placeholder
:data:`CLOUDPICKLE_PLACEHOLDER` to make payloads deterministic. A traceback then reads
``File "<dynamic-code>", line 40, in train`` with no source line: the root-cause report loses the
line that raised. The file itself is in the worker's image (the same container as the agent), so
the agent records the name before pickling and the worker puts it back after unpickling.
"""

from __future__ import annotations

import types
from typing import Any

#: The file name cloudpickle writes into code objects it pickles by value.
CLOUDPICKLE_PLACEHOLDER = "<dynamic-code>"


def source_file_of(function: Any) -> str | None:
    """The file a plain Python function was defined in; ``None`` for anything else."""
    code = getattr(function, "__code__", None)
    return code.co_filename if isinstance(code, types.CodeType) else None


def _with_file_name(code: types.CodeType, file_name: str) -> types.CodeType:
    """``code`` and the code objects nested in it (inner functions, comprehensions) named ``file_name``,
    where cloudpickle put its placeholder."""
    consts = tuple(
        _with_file_name(const, file_name) if isinstance(const, types.CodeType) else const for const in code.co_consts
    )
    if code.co_filename != CLOUDPICKLE_PLACEHOLDER and consts == code.co_consts:
        return code
    name = file_name if code.co_filename == CLOUDPICKLE_PLACEHOLDER else code.co_filename
    return code.replace(co_filename=name, co_consts=consts)


def restore_source_file(function: Any, file_name: str | None) -> None:
    """Give ``function`` (unpickled in this worker) back its source file name, if cloudpickle replaced it."""
    code = getattr(function, "__code__", None)
    if file_name and isinstance(code, types.CodeType):
        function.__code__ = _with_file_name(code, file_name)
