"""``python -m flytekitplugins_rootcause.entrypoint``: the same as ``pyflyte-rootcause-execute``."""

from flytekitplugins_rootcause.entrypoint.main import main

main()
