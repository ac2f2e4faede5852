"""``rootcause_harness/flytekit/job.py`` without running a job: the store a job's prefixes live in (its
protocol, the variables its pods get, the operator's copy of a prefix), the task's serialized container args
with propeller's templates filled, and the inputs file propeller writes."""

from __future__ import annotations

from pathlib import Path

from flyteidl.core import literals_pb2
from flytekit import task
from flytekit.models.literals import LiteralMap

from rootcause_harness.flytekit import training
from rootcause_harness.flytekit.job import (
    JobResult,
    JobSpec,
    StoreAccess,
    container_args,
    fill_templates,
    pod_name,
    serialize,
    write_inputs,
)
from rootcause_harness.operator import JobPhase


@task
def plain(x: int) -> int:
    """A task without kfpytorch's shared memory: a plain container, not a pod."""
    return x


def test_a_stores_protocol_is_its_roots_scheme_or_file() -> None:
    assert StoreAccess("s3://bucket/x").protocol == "s3"
    assert StoreAccess("gs://bucket").protocol == "gs"
    assert StoreAccess("/local/folder").protocol == "file"


def test_an_s3_stores_pods_get_flytekits_s3_settings_on_top_of_its_own() -> None:
    store = StoreAccess("s3://b", {"endpoint_url": "http://127.0.0.1:9000", "key": "k", "secret": "s"}, {"MINE": "1"})
    assert store.pod_env() == {"MINE": "1", "FLYTE_AWS_ENDPOINT": "http://127.0.0.1:9000",
                               "FLYTE_AWS_ACCESS_KEY_ID": "k", "FLYTE_AWS_SECRET_ACCESS_KEY": "s"}
    assert StoreAccess("/folder", env={"MINE": "1"}).pod_env() == {"MINE": "1"}
    store.pod_env()["MINE"] = "changed"
    assert store.env == {"MINE": "1"}  # each pod's copy is its own


def test_the_operators_copy_takes_the_files_directly_under_the_prefix(tmp_path: Path) -> None:
    prefix = tmp_path / "store" / "data" / "0"
    (prefix / "nested").mkdir(parents=True)
    (prefix / "error-a.pb").write_bytes(b"a")
    (prefix / "outputs.pb").write_bytes(b"o")
    (prefix / "nested" / "deeper.pb").write_bytes(b"d")
    into = tmp_path / "snapshot"
    into.mkdir()
    StoreAccess(str(tmp_path / "store")).prefix_copier(f"{prefix}/")(into)
    assert {p.name: p.read_bytes() for p in into.iterdir()} == {"error-a.pb": b"a", "outputs.pb": b"o"}


def test_copying_a_prefix_nothing_was_written_to_copies_nothing(tmp_path: Path) -> None:
    into = tmp_path / "snapshot"
    into.mkdir()
    StoreAccess(str(tmp_path)).prefix_copier(str(tmp_path / "never"))(into)
    assert list(into.iterdir()) == []


def test_the_container_args_are_the_tasks_serialized_ones_with_templates_filled() -> None:
    args = container_args(serialize(training.train_2x2))
    assert args[0] == "pyflyte-rootcause-execute"
    assert "{{.input}}" in args and "{{.outputPrefix}}" in args
    filled = fill_templates(args, {"{{.input}}": "/s/inputs.pb", "{{.outputPrefix}}": "/s/data/0"})
    assert filled[filled.index("--inputs") + 1] == "/s/inputs.pb"
    assert filled[filled.index("--output-prefix") + 1] == "/s/data/0"
    assert "{{.rawOutputDataPrefix}}" in filled  # not given: left as is
    assert len(filled) == len(args) and args[0] == filled[0]


def test_an_elastic_tasks_args_are_its_pods_primary_containers() -> None:
    template = serialize(training.train_2x2_elastic)
    assert template.id.name == "rootcause_harness.flytekit.training.train_2x2_elastic"
    assert template.container is None and template.config["primary_container_name"] == "primary"
    [primary] = template.k8s_pod.pod_spec["containers"]
    assert primary["image"] == "flytekitplugins-rootcause:local"
    assert container_args(template) == primary["args"] and primary["args"][0] == "pyflyte-execute"


def test_a_plain_tasks_args_are_its_containers() -> None:
    template = serialize(plain)
    assert template.container is not None and template.container.image == "flytekitplugins-rootcause:local"
    args = container_args(template)
    assert args == list(template.container.args)
    assert args[0] == "pyflyte-execute" and args[-3:] == [__name__, "task-name", "plain"]


def test_the_inputs_file_is_a_literal_map_of_the_tasks_inputs(tmp_path: Path) -> None:
    store = StoreAccess(str(tmp_path))
    path = f"{tmp_path}/exec/inputs.pb"
    write_inputs(training.train_2x2, {"steps": 5}, store, path)
    proto = literals_pb2.LiteralMap()
    proto.ParseFromString(Path(path).read_bytes())
    assert LiteralMap.from_flyte_idl(proto).literals["steps"].scalar.primitive.integer == 5


def test_pod_names_and_a_result_no_operator_watched(tmp_path: Path) -> None:
    spec = JobSpec(task=training.train_2x2, nnodes=3, nproc_per_node=2, store=StoreAccess(str(tmp_path)),
                   pod_name_prefix="job")
    assert [pod_name(spec, index) for index in range(3)] == ["job-0", "job-1", "job-2"]
    result = JobResult(spec=spec, execution_id="e", output_prefix="p", raw_output_prefix="r", sim_dir=tmp_path,
                       pods=[], fault_ns=None, placement={}, timed_out=False)
    assert result.operator.phase == JobPhase.UNDECIDED and result.replaced == []
    assert (spec.aggregation, spec.inputs) == (False, {})
