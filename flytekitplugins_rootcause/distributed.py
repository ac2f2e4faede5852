"""The collective backend and device a worker should use, under the plugin's name.

The choice lives in the engine (:mod:`rootcause_engine.distributed`: NCCL where CUDA is present,
gloo otherwise); this module is the name training code imports it by.
"""

from rootcause_engine.distributed import default_backend, default_device

__all__ = ["default_backend", "default_device"]
