"""``rootcause-demo-flyte2``: a local 2-pod x 2-worker Flyte 2 PyTorchJob through ``a0``, then its ``error.pb``.

The Flyte 2 twin of ``rootcause-demo``. It runs the simulated job (``rootcause_harness.flyte2``:
every pod the real ``a0`` entrypoint, a local folder as the bucket) with an injected fault (by
default a SIGKILL on one rank of pod 1, as the OOM killer would), reads back the action's one
``error.pb`` (flyteidl2's ``ErrorDocument``, what Flyte 2's backend reads and the UI shows), prints
its kind and message and the pod and rank it names, and exits non-zero when that is not the worker
the fault was injected into. ``--upstream`` runs the same job with ``flyteplugins.pytorch.Elastic``.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click
from flyteidl2.core import execution_pb2

from rootcause_harness.faults import POD_FAULTS, Fault, FaultKind
from rootcause_harness.flyte2 import training
from rootcause_harness.flyte2.console import console_at_decision
from rootcause_harness.flyte2.job import JobSpec, run_job
from rootcause_harness.flyte2.verdict import rootcause_verdict, upstream_verdict

NNODES, NPROC = 2, 2
#: A hang surfaces only when its peers' collective times out: that fault runs the tasks whose
#: collective timeout is short (3 s).
SHORT_TIMEOUT_KINDS = (FaultKind.HANG,)


@click.command()
@click.option("--fault", "kind", type=click.Choice([k.value for k in FaultKind]), default=FaultKind.SIGKILL.value,
              show_default=True, help="What happens to the faulty worker (see rootcause-demo --help).")
@click.option("--pod", "pod_index", type=click.IntRange(0, NNODES - 1), default=1, show_default=True,
              help="Index of the pod whose worker fails.")
@click.option("--local-rank", type=click.IntRange(0, NPROC - 1), default=1, show_default=True)
@click.option("--upstream", is_flag=True, help="Run the job with upstream flyteplugins.pytorch.Elastic instead.")
@click.option("--output", "output_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("rootcause-demo-flyte2-output"), show_default=True, help="Local folder used as the bucket.")
def main(kind: str, pod_index: int, local_rank: int, upstream: bool, output_dir: Path) -> None:
    """Run the demo job and print what the action's error.pb says failed first."""
    fault_kind = FaultKind(kind)
    short = fault_kind in SHORT_TIMEOUT_KINDS
    if upstream:
        task = training.train_2x2_elastic_short_timeout if short else training.train_2x2_elastic
    else:
        task = training.train_2x2_short_timeout if short else training.train_2x2
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    target, other = f"train-worker-{pod_index}", f"train-worker-{(pod_index + 1) % NNODES}"
    fault = Fault(fault_kind, pod=target, local_rank=local_rank, second_pod=other)
    spec = JobSpec(task=task, nnodes=NNODES, nproc_per_node=NPROC, root=output_dir / "bucket", fault=fault)
    flavour = "flyteplugins.pytorch.Elastic" if upstream else "ElasticRootCause"
    click.echo(f"Simulated Flyte 2 PyTorchJob ({flavour}): {NNODES} pods x {NPROC} workers through a0, fault "
               f"{kind} on {target} local rank {local_rank}; files under {output_dir}")
    started = time.monotonic()
    result = run_job(spec, work_dir=output_dir / "pods")
    late = " (timed out)" if result.timed_out else ""
    click.echo(f"All pods exited after {time.monotonic() - started:.1f} s{late}")
    document = result.error_document
    if document is None:
        why = "was written" if result.error_pb == "missing" else "could be read (the pods' writes tore it)"
        click.echo(f"No error.pb {why}: the action's failure would show no message.")
        click.echo(console_at_decision(result).line())
        sys.exit(1)
    error = document.error
    click.echo(f"error.pb: code {error.code}, kind {execution_pb2.ContainerError.Kind.Name(error.kind)}")
    click.echo(error.message)
    named = upstream_verdict(error.message, result.placement) if upstream else rootcause_verdict(error.message)
    click.echo(f"named:    {named[0]} rank {named[1]}")
    click.echo(f"injected: {result.injected_worker} rank {result.injected_rank}")
    click.echo(f"error.pb: {result.output_prefix / 'error.pb'}")
    click.echo(f"pod logs: {result.sim_dir}")
    read_upstream = functools.partial(upstream_verdict, placement=result.placement)
    at_decision = console_at_decision(result, read_upstream if upstream else rootcause_verdict)
    click.echo(f"at the operator's decision: {at_decision.outcome}")
    click.echo(at_decision.line())
    right = named[0] == at_decision.worker == result.injected_worker and (
        fault_kind in POD_FAULTS or named[1] == at_decision.rank == result.injected_rank
    )
    if not right:
        click.echo("The action's error names another worker than the injected fault.")
        sys.exit(1)


if __name__ == "__main__":
    main()
