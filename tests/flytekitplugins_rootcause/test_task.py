"""An ElasticRootCause task serializes like Elastic, with the patched entrypoint in its command."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from flytekit.configuration import Image, ImageConfig, SerializationSettings
from flytekit.tools.translator import get_serializable

from flytekitplugins_rootcause import ElasticRootCause, ElasticRootCauseFunctionTask
from tests.elastic_tasks import serialization as tasks

SETTINGS = SerializationSettings(
    project="p", domain="d", version="v1",
    image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/acme/train", tag="1")),
)


def _template(entity):
    return get_serializable(OrderedDict(), SETTINGS, entity).template


def _container_args(template) -> list[str]:
    """Args of the task's container: a plain container, or the primary container of its pod spec
    (kfpytorch adds a shared-memory volume, which turns the task into a pod task)."""
    if template.container is not None:
        return list(template.container.args)
    primary = template.config["primary_container_name"]
    [container] = [c for c in template.k8s_pod.pod_spec["containers"] if c["name"] == primary]
    return list(container["args"])


@pytest.mark.parametrize(("elastic", "ours"), [(tasks.elastic_train, tasks.rootcause_train),
                                               (tasks.elastic_single, tasks.rootcause_single)])
def test_same_task_type_and_custom_as_elastic(elastic, ours) -> None:
    assert isinstance(ours, ElasticRootCauseFunctionTask)
    theirs_t, ours_t = _template(elastic), _template(ours)
    assert ours_t.type == theirs_t.type
    assert ours_t.custom == theirs_t.custom
    assert ours_t.task_type_version == theirs_t.task_type_version


def test_multi_node_custom_is_a_pytorch_job() -> None:
    template = _template(tasks.rootcause_train)
    assert template.type == "pytorch"
    assert template.custom["elasticConfig"] == {
        "rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 2, "nprocPerNode": 4, "maxRestarts": 2}
    assert template.custom["workerReplicas"]["replicas"] == 2
    assert template.custom["runPolicy"] == {"backoffLimit": 3}


def test_container_runs_the_patched_entrypoint_with_flytekits_arguments() -> None:
    ours = _container_args(_template(tasks.rootcause_train))
    theirs = _container_args(_template(tasks.elastic_train))
    assert ours[0] == "pyflyte-rootcause-execute" and theirs[0] == "pyflyte-execute"
    assert ours[1:] == [a.replace("elastic_train", "rootcause_train") for a in theirs[1:]]


def test_all_elastic_fields_keep_working_and_new_defaults_apply() -> None:
    config = ElasticRootCause(nnodes="2:4", nproc_per_node=8, start_method="fork", max_restarts=1,
                              rdzv_configs={"timeout": 60}, increase_shared_mem=False)
    assert (config.nnodes, config.nproc_per_node, config.start_method) == ("2:4", 8, "fork")
    assert config.monitor_interval == 0.2 and config.teardown_grace_s == 5.0
    assert ElasticRootCause(monitor_interval=5).monitor_interval == 5
    with pytest.raises(ValueError, match="monitor_interval"):
        ElasticRootCause(monitor_interval=0)
