"""Find this plugin's root-cause error in what a locally run task raised (flytekit wraps it)."""

from __future__ import annotations

import pytest

from flytekitplugins_rootcause import ElasticRootCauseError, ElasticRootCauseRecoverableError


def find_root_cause_error(exc: BaseException) -> ElasticRootCauseError | None:
    """flytekit's local execution wraps task errors; find ours in the chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ElasticRootCauseError | ElasticRootCauseRecoverableError):
            return seen  # type: ignore[return-value]
        seen = seen.__cause__ or seen.__context__ or getattr(seen, "value", None)
    return None


def root_cause_error_of(excinfo: pytest.ExceptionInfo[BaseException]) -> ElasticRootCauseError:
    error = find_root_cause_error(excinfo.value)
    if error is None:
        raise AssertionError(f"no root-cause error in {excinfo.value!r}")
    return error
