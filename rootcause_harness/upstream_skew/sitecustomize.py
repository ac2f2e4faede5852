"""A simulated pod's upstream, skewed from the installed one at interpreter start: what users run.

The simulator puts this folder first on ``PYTHONPATH`` of every pod (``faults.upstream_skew_env``);
Python's ``site`` imports ``sitecustomize`` at start-up, so every process of the pod (its main
process and the workers torch starts) sees the same upstream:

- ``ROOTCAUSE_SIM_REMOVED_ATTRIBUTES``: dotted names deleted (a build without an internal, e.g.
  ``torch._C._distributed_c10d._dump_fr_trace``);
- ``ROOTCAUSE_SIM_FROZEN_CLASSES``: dotted names of classes replaced by a subclass whose attributes
  cannot be set (a patch of one then raises ``TypeError`` while it is applied).

Not a package on purpose: only ``site`` loads it. Names are comma-separated.
"""

import importlib
import os


def _owner(dotted):
    """(the object holding the last part of ``dotted``, that part): the longest importable module
    prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise ImportError(dotted)


def _frozen(cls):
    made = []

    class Frozen(type(cls)):
        def __setattr__(self, name, value):
            if self not in made:  # class creation itself sets some (ABCMeta's)
                return super().__setattr__(name, value)
            raise TypeError(f"{self.__qualname__} is frozen here: cannot set {name}")

    made.append(Frozen(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}))
    return made[0]


for _dotted in filter(None, os.environ.get("ROOTCAUSE_SIM_REMOVED_ATTRIBUTES", "").split(",")):
    _holder, _name = _owner(_dotted)
    delattr(_holder, _name)

for _dotted in filter(None, os.environ.get("ROOTCAUSE_SIM_FROZEN_CLASSES", "").split(",")):
    _holder, _name = _owner(_dotted)
    setattr(_holder, _name, _frozen(getattr(_holder, _name)))
