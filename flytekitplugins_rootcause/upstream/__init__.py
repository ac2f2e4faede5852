"""The flytekit front-end's seam with flytekit and kfpytorch internals.

The contract is the engine's seam's (``rootcause_engine.upstream``, which holds torch's symbols):
every flytekit and kfpytorch symbol this plugin patches or reads privately is listed below, declared
in its module's ``SYMBOLS``, checked before the first patch, smoke-tested, and reached only through
this package. Nothing here is imported by ``import flytekitplugins_rootcause`` (flytekit imports
that at its own import time), and this file imports no torch, flytekit or kfpytorch.

Whether this flavour's diagnosis runs is decided here, once (:func:`task_readiness`, the engine's
:mod:`rootcause_engine.upstream.readiness` verdict over every seam the task uses): the config warns
with it where the task is defined, the task acts on it in the pod (off: kfpytorch's own launch),
and the entrypoint on its own part (:func:`entrypoint_readiness`; off: flytekit's ``pyflyte-execute``).

- :mod:`rootcause_engine.upstream.patching` and :mod:`rootcause_engine.upstream.versions`: the one way to
  patch, and the version check, shared with the engine's seam.
- :mod:`.flytekit_entrypoint` (the entrypoint; flytekit): ``flytekit.bin.entrypoint.execute_task_cmd``
  (reused), ``flytekit.bin.entrypoint._dispatch_execute`` (replaced while the command runs),
  ``flytekit.bin.entrypoint._build_error_file_name``, ``flytekit.bin.entrypoint._get_worker_name``,
  ``flytekit.bin.entrypoint.get_container_error_timestamp``, ``flytekit.bin.entrypoint.get_traceback_str``
  (replaced while a task runs), ``flytekit.bin.entrypoint.get_one_of`` (called),
  ``flytekit.core.data_persistence.FileAccessProvider.put_data`` (replaced on one instance).
- :mod:`.kfpytorch` (the task classes; flytekitplugins-kfpytorch):
  ``flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._execute`` (extended and called),
  ``flytekitplugins.kfpytorch.task.PytorchElasticFunctionTask._task_function`` (replaced for a launch).
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
