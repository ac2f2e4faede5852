"""``restart_policy``: refused before any launch where the job's shape cannot support it."""

from __future__ import annotations

import pytest

from flytekitplugins_rootcause.config import ElasticRootCause
from rootcause_engine.worker.process_settings import agent_environment


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"restart_policy": "gentle"}, "restart_policy must be one of"),
        ({"restart_policy": "soft", "nnodes": 2, "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"restart_policy": "soft", "nnodes": "3:2", "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"restart_policy": "soft", "nnodes": "0:2", "max_restarts": 1}, 'needs nnodes as a range "min:max"'),
        ({"restart_policy": "soft", "nnodes": "1:2"}, "needs max_restarts >= 1"),
        ({"restart_policy": "soft", "nnodes": "1:2", "max_restarts": 1, "nccl_async_error_handling": 3},
         "SkipCleanUp"),
        ({"soft_restart_timeout_s": 0}, "soft_restart_timeout_s must be > 0"),
    ],
)
def test_a_soft_policy_the_job_cannot_support_is_refused_clearly(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ElasticRootCause(**fields)  # type: ignore[arg-type]


def test_the_default_is_torch_s_hard_restart() -> None:
    assert ElasticRootCause().restart_policy == "hard"


def test_under_soft_restarts_nccl_errors_abort_the_communicators_but_keep_the_process() -> None:
    soft = ElasticRootCause(nnodes="1:2", max_restarts=1, restart_policy="soft")
    assert agent_environment(soft)["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"  # CleanUpOnly
    assert agent_environment(ElasticRootCause())["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"  # TearDown
    explicit = ElasticRootCause(nnodes="1:2", max_restarts=1, restart_policy="soft", nccl_async_error_handling=0)
    assert agent_environment(explicit)["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
