"""Plain ``@task`` functions (flytekit's own task class, no ``ElasticRootCause`` config).

They succeed, or raise what user code or the root-cause agent raises. This module does not import
torch, so an entrypoint run of one of these costs about what ``pyflyte-execute`` costs.
"""

from __future__ import annotations

from flytekit import task
from flytekit.exceptions.user import FlyteRecoverableException

from tests.entrypoint_tasks.raising import raise_root_cause


@task
def add_one(x: int) -> int:
    return x + 1


@task
def fail_value_error(x: int) -> int:
    if x >= 0:
        raise ValueError(f"bad value {x}")
    return x


@task
def fail_recoverable(x: int) -> int:
    if x >= 0:
        raise FlyteRecoverableException(f"transient failure for {x}")
    return x


@task
def fail_root_cause(x: int) -> int:
    raise_root_cause(recoverable=False)
    return x


@task
def fail_root_cause_recoverable(x: int) -> int:
    raise_root_cause(recoverable=True)
    return x
