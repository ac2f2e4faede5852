"""The flytekit front-end's seam with flytekit and kfpytorch internals.

A flytekit release may rename a private name this plugin patches or reads. So each such symbol is
reached only through this package, declared in its module's ``SYMBOLS``, checked before the first
patch and smoke-tested, under the engine's seam's contract. :mod:`.flytekit_entrypoint` uses
``flytekit.bin.entrypoint.execute_task_cmd``, ``flytekit.bin.entrypoint._dispatch_execute``,
``flytekit.bin.entrypoint._build_error_file_name``, ``flytekit.bin.entrypoint._get_worker_name``,
``flytekit.bin.entrypoint.get_container_error_timestamp``, ``flytekit.bin.entrypoint.get_traceback_str``,
``flytekit.bin.entrypoint.get_one_of`` and ``flytekit.core.data_persistence.FileAccessProvider.put_data``.
:mod:`.kfpytorch` uses ``flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._execute`` and
``flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._task_function``. Whether the diagnosis
runs is decided here, once (:func:`task_readiness`, :func:`entrypoint_readiness`). ``docs/entrypoint.md``
says how each symbol is used.
"""

from __future__ import annotations

from rootcause_engine.upstream.readiness import Readiness, check, engine_seams

#: The seam of ``pyflyte-rootcause-execute`` (flytekit only: checking it loads no torch).
ENTRYPOINT_SEAMS = ("flytekitplugins_rootcause.upstream.flytekit_entrypoint",)
#: kfpytorch's seam, which the task's launch uses.
TASK_SEAMS = ("flytekitplugins_rootcause.upstream.kfpytorch",)


def precheck_readiness() -> Readiness:
    """The verdict for a ``StragglerPrecheck`` task: kfpytorch's seam, which hands its workers the check."""
    return check(TASK_SEAMS)


def entrypoint_readiness() -> Readiness:
    """The verdict for the patched entrypoint: off when a flytekit internal it swaps is missing."""
    return check(ENTRYPOINT_SEAMS)


def task_readiness(restart_policy: str = "hard") -> Readiness:
    """The verdict for an ``ElasticRootCause`` task: torch's seams its launch uses, kfpytorch's and
    the entrypoint's (the task's error documents are the entrypoint's)."""
    return check((*engine_seams(restart_policy), *TASK_SEAMS, *ENTRYPOINT_SEAMS))
