"""The flytekit front-end's seam with flytekit and kfpytorch internals.

The contract is the engine's seam's (``rootcause_engine.upstream``, which holds torch's symbols):
every flytekit and kfpytorch symbol this plugin patches or reads privately is listed below, declared
in its module's ``SYMBOLS``, checked before the first patch, smoke-tested, and reached only through
this package. Nothing here is imported by ``import flytekitplugins_rootcause`` (flytekit imports
that at its own import time), and this file imports nothing.

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
