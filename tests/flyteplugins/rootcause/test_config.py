"""``ElasticRootCause`` is Flyte 2's ``Elastic`` to the backend, and gets its own task class (no processes)."""

from __future__ import annotations

import dataclasses

import flyte
import pytest
from flyte.models import SerializationContext
from flyteplugins.pytorch import Elastic
from flyteplugins.pytorch.task import RunPolicy, TorchFunctionTask

from flyteplugins.rootcause import ElasticRootCause, RootCauseTorchFunctionTask
from rootcause_harness.flyte2 import training
from tests import REPO_ROOT

CONTEXT = SerializationContext(version="v1", root_dir=REPO_ROOT)


def test_the_task_class_is_ours_and_the_backend_sees_upstream_s_task_type_and_custom() -> None:
    policy = RunPolicy(clean_pod_policy="all", backoff_limit=2)
    ours = ElasticRootCause(nnodes="2:4", nproc_per_node=8, max_restarts=1, run_policy=policy)
    theirs = Elastic(nnodes="2:4", nproc_per_node=8, max_restarts=1, run_policy=policy)
    tasks = [flyte.TaskEnvironment(name=f"env{i}", plugin_config=config).task(training.run_training)
             for i, config in enumerate((ours, theirs))]
    assert type(tasks[0]) is RootCauseTorchFunctionTask and type(tasks[1]) is TorchFunctionTask
    assert tasks[0].task_type == tasks[1].task_type == "pytorch"
    assert tasks[0].custom_config(CONTEXT) == tasks[1].custom_config(CONTEXT)
    single = flyte.TaskEnvironment(name="single", plugin_config=ElasticRootCause(nnodes=1, nproc_per_node=2))
    assert single.task(training.run_training).task_type == "python-task"


def test_every_elastic_field_keeps_its_place_and_default_but_the_monitor_interval() -> None:
    theirs = {f.name: f for f in dataclasses.fields(Elastic)}
    ours = [f.name for f in dataclasses.fields(ElasticRootCause)]
    assert ours[: len(theirs)] == list(theirs)
    positional = ElasticRootCause(2, 4, "c10d", None, 1.0, 0)
    assert (positional.monitor_interval, positional.max_restarts) == (1.0, 0)
    defaults = ElasticRootCause(nnodes=2, nproc_per_node=1)
    reference = Elastic(nnodes=2, nproc_per_node=1)
    changed = [name for name in theirs if getattr(defaults, name) != getattr(reference, name)]
    assert changed == ["monitor_interval"]


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"teardown_grace_s": -1}, "teardown_grace_s must be >= 0"),
        ({"agreement_timeout_s": 0}, "agreement_timeout_s must be > 0"),
        ({"hang_after_s": 2}, "hang_after_s must be >= 10 seconds"),
        ({"restart_policy": "soft"}, 'needs nnodes as a range "min:max"'),
        ({"restart_policy": "sometimes"}, "restart_policy must be one of"),
        ({"nccl_heartbeat_timeout_sec": 0}, "nccl_heartbeat_timeout_sec must be > 0"),
        ({"agent_hang_timeout_s": 1}, "agent_hang_timeout_s (1) must exceed"),
        ({"nproc_per_node": 0}, "nproc_per_node must be a whole number >= 1"),
    ],
)
def test_a_setting_no_launch_could_use_is_refused_when_the_config_is_built(settings: dict, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        ElasticRootCause(**{"nnodes": 2, "nproc_per_node": 2, **settings})
    assert says in str(refused.value)
