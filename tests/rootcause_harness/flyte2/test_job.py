"""``rootcause_harness/flyte2/job.py`` without running a job: the container args a pod runs (the task's own,
templates filled), the action's inputs, and what a result reads back from the output prefix."""

from __future__ import annotations

from pathlib import Path

from flyteidl2.core import execution_pb2, literals_pb2
from flyteidl2.task import common_pb2

from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.job import ROOT_DIR, JobResult, JobSpec, container_args, inputs_of
from rootcause_harness.operator import JobPhase


def _spec(tmp_path: Path, **inputs: int) -> JobSpec:
    return JobSpec(task=training.train_2x1, nnodes=2, nproc_per_node=1, root=tmp_path / "bucket", inputs=inputs)


def _result(tmp_path: Path) -> JobResult:
    prefix = tmp_path / "data" / "a0"
    prefix.mkdir(parents=True)
    return JobResult(spec=_spec(tmp_path), run_name="simabc", output_prefix=prefix, sim_dir=tmp_path / "sim", pods=[],
                     fault_ns=None, placement={}, timed_out=False)


def test_the_backends_templates_are_filled_in_the_tasks_own_args() -> None:
    values = {"{{.input}}": "/b/inputs.pb", "{{.outputPrefix}}": "/b/data/a0", "{{.runName}}": "simx",
              "{{.actionName}}": "a0"}
    args = container_args(training.train_2x2, values)
    assert args[0] == "rootcause-a0"
    for flag, value in (("--inputs", "/b/inputs.pb"), ("--outputs-path", "/b/data/a0"), ("--run-name", "simx"),
                        ("--name", "a0"), ("--version", "simulated")):
        assert args[args.index(flag) + 1] == value
    assert args[args.index("--raw-data-path") + 1] == "{{.rawOutputDataPrefix}}"  # not given: left as is
    assert args[-4:] == ["mod", "rootcause_harness.flyte2.training", "instance", "train_2x2"]


def test_the_tasks_module_is_importable_from_the_root_dir() -> None:
    assert (ROOT_DIR / "rootcause_harness" / "flyte2" / "training.py").is_file()


def test_no_inputs_is_an_empty_inputs_file(tmp_path: Path) -> None:
    assert inputs_of(_spec(tmp_path)) == common_pb2.Inputs()


def test_inputs_are_converted_as_flyte_converts_a_runs_arguments(tmp_path: Path) -> None:
    inputs = inputs_of(_spec(tmp_path, steps=3))
    assert [(named.name, named.value.scalar.primitive.integer) for named in inputs.literals] == [("steps", 3)]


def test_a_result_tells_a_missing_a_torn_and_a_written_error_pb_apart(tmp_path: Path) -> None:
    result = _result(tmp_path)
    assert (result.error_pb, result.error_document) == ("missing", None)
    (result.output_prefix / "error.pb").write_bytes(b"\xff\xff\xff")
    assert (result.error_pb, result.error_document) == ("torn", None)
    document = execution_pb2.ErrorDocument(error=execution_pb2.ContainerError(
        code="USER:Boom", message="[root cause] rank 1", kind=execution_pb2.ContainerError.NON_RECOVERABLE))
    (result.output_prefix / "error.pb").write_bytes(document.SerializeToString())
    assert result.error_pb == "written" and result.error_document == document


def test_a_results_output_is_rank_0s_float(tmp_path: Path) -> None:
    result = _result(tmp_path)
    assert result.output is None
    value = literals_pb2.Literal(scalar=literals_pb2.Scalar(primitive=literals_pb2.Primitive(float_value=2.5)))
    outputs = common_pb2.Outputs(literals=[common_pb2.NamedLiteral(name="o0", value=value)])
    (result.output_prefix / "outputs.pb").write_bytes(outputs.SerializeToString())
    assert result.output == 2.5
    (result.output_prefix / "outputs.pb").write_bytes(common_pb2.Outputs().SerializeToString())
    assert result.output is None  # no o0


def test_a_result_no_operator_watched_is_undecided(tmp_path: Path) -> None:
    result = _result(tmp_path)
    assert result.operator.phase == JobPhase.UNDECIDED and result.replaced == []
