"""``python -m flytekitplugins_rootcause.entrypoint``: the same as ``pyflyte-rootcause-execute``."""

from flytekitplugins_rootcause.entrypoint.command import execute_task_cmd

execute_task_cmd()
