"""``rootcause-demo``: a local 2-pod x 2-worker PyTorchJob with an injected failure, then the verdict.

The README's first command. It runs the multi-pod simulator on the embedded default store (a local
folder), injects the fault (by default a SIGKILL on one rank of pod 1, as the OOM killer would),
lets every pod write its error file through the patched entrypoint, reads them all back with
``backend_reader`` exactly as the propeller side would, and prints the root-cause table, a line
``root cause: <worker> rank <global rank>``, what the Flyte console would show (upstream
flytepropeller's own rule applied to the same files, ``backend_reader.upstream_rule``) and where the
files are. It exits non-zero when either names another worker than the one the fault was injected
into.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from backend_reader import RemoteFileOutputReader
from backend_reader.render import print_table, table_console
from backend_reader.upstream_rule import UpstreamReadError, earliest_error
from rootcause_harness.faults import POD_FAULTS, Fault, FaultKind
from rootcause_harness.flytekit.console import console_at_decision
from rootcause_harness.flytekit.job import JobSpec, StoreAccess, pod_name, run_job
from rootcause_harness.flytekit.training import train_2x2, train_2x2_short_timeout

NNODES, NPROC = 2, 2
#: A hang surfaces only when its peers' collective times out: that fault runs the task whose
#: collective timeout is short (3 s), so the demo does not wait torch's default 30 minutes.
DEMO_TASKS = {FaultKind.HANG: train_2x2_short_timeout}


@click.command()
@click.option(
    "--fault",
    "kind",
    type=click.Choice([k.value for k in FaultKind]),
    default=FaultKind.SIGKILL.value,
    show_default=True,
    help="What happens to the faulty worker: raise, sigkill, sigabrt, sigsegv (a real segfault), exit "
    "(os._exit(3)), ordering (two errors on two pods 50 ms apart), vanish (its whole pod SIGKILLed at once: "
    "a lost node), hang (it sleeps; its peers' all-reduce times out after 3 s), init-hang (it sleeps before "
    "init_process_group; its peers stop waiting for it after 20 s), freeze (every process of its pod SIGSTOPped: "
    "a frozen node), preempt (its pod's kubelet sends SIGTERM, then SIGKILL 30 s later).",
)
@click.option("--pod", "pod_index", type=click.IntRange(0, NNODES - 1), default=1, show_default=True,
              help="Index of the pod whose worker fails.")
@click.option("--local-rank", type=click.IntRange(0, NPROC - 1), default=1, show_default=True)
@click.option("--output", "output_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("rootcause-demo-output"), show_default=True, help="Local folder used as the bucket.")
def main(kind: str, pod_index: int, local_rank: int, output_dir: Path) -> None:
    """Run the demo job and print which worker really failed first."""
    console = table_console()
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    spec = JobSpec(task=train_2x2, nnodes=NNODES, nproc_per_node=NPROC, store=StoreAccess(str(output_dir)))
    target = pod_name(spec, pod_index)
    other = pod_name(spec, (pod_index + 1) % NNODES)
    fault = Fault(FaultKind(kind), pod=target, local_rank=local_rank, second_pod=other)
    task = DEMO_TASKS.get(FaultKind(kind), train_2x2)
    spec = JobSpec(task=task, nnodes=NNODES, nproc_per_node=NPROC, store=spec.store, fault=fault)

    console.print(f"[bold]Simulated PyTorchJob[/]: {NNODES} pods x {NPROC} workers, fault "
                  f"[bold red]{kind}[/] on {target} local rank {local_rank}; files under {output_dir}")
    started = time.monotonic()
    result = run_job(spec, work_dir=output_dir / "pods")
    console.print(f"All pods exited after {time.monotonic() - started:.1f} s"
                  + (" [red](timed out)[/]" if result.timed_out else ""))

    read = RemoteFileOutputReader(result.output_prefix, expected_workers=NNODES, settle_timeout=10).read_all()
    print_table(read, console)
    if not read.failures:
        console.print("[red]No error file was written: the job did not fail as expected.[/]")
        sys.exit(1)
    root = read.failures[0]
    rank = "?" if root.global_rank is None else str(root.global_rank)
    console.print(f"root cause: {root.worker} rank {rank}", highlight=False)
    console.print(f"injected:   {result.injected_worker} rank {result.injected_rank}", highlight=False)
    try:
        pick = earliest_error(result.output_prefix)
        shown = pick.worker if pick is not None else None
    except UpstreamReadError as error:
        shown = f"(the read fails: {error})"
    console.print(f"Flyte console after the last exit (upstream rule, aggregation on): {shown}", highlight=False)
    at_decision = console_at_decision(result, aggregation=True)
    console.print(f"Flyte console at the operator's decision: {at_decision.outcome}", highlight=False)
    console.print(f"error files: {result.output_prefix}", highlight=False)
    console.print(f"pod logs:    {result.sim_dir}", highlight=False)
    print(at_decision.line(), flush=True)  # plain, for scripts
    correct = at_decision.worker == shown == root.worker == result.injected_worker and (
        root.global_rank is None or FaultKind(kind) in POD_FAULTS or root.global_rank == result.injected_rank
    )
    if not correct:
        console.print("[bold red]The reported root cause is not the injected fault.[/]")
        sys.exit(1)


if __name__ == "__main__":
    main()
