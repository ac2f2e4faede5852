"""The suite: ``tests/<package path>/test_<module>.py`` per module, ``tests/scenarios/`` across modules."""

from pathlib import Path

#: The repository's root, wherever in ``tests/`` a file sits.
REPO_ROOT = Path(__file__).resolve().parent.parent
