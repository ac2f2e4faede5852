"""The soft-restart API for training loops (torch's soft-restart RFC), under the plugin's name.

The API lives in the engine (:mod:`rootcause_engine.soft_restart`: it runs in the workers and needs
torch only); this module is the name users import it by:

    from flytekitplugins_rootcause import soft_restart
"""

from rootcause_engine.soft_restart import *  # noqa: F403
from rootcause_engine.soft_restart import __all__  # noqa: F401
