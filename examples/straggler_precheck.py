"""Find slow nodes before training: a straggler pre-check task, then training gated on it.

Locally (one node, so the check reports itself skipped: there is no other node to compare with):

    pyflyte run examples/straggler_precheck.py precheck_then_train

On a cluster (4 pods of a PyTorchJob, 1 worker each; the image is the repo's Dockerfile):

    STRAGGLER_NNODES=4 pyflyte run --remote --image <image> examples/straggler_precheck.py precheck_then_train

or, letting flytekit build the image (examples/image_spec.py), from the repository root:

    STRAGGLER_NNODES=4 ROOTCAUSE_REGISTRY=<registry> \
        pyflyte run --remote examples/straggler_precheck.py precheck_then_train

To try the check on several simulated nodes on one machine (one torch elastic agent process per
node, one of them given a simulated device 1.5x slower), see ``docs/straggler.md``.
"""

from __future__ import annotations

import os

from flytekit import task, workflow
from image_spec import image_from_environment

from flytekitplugins_rootcause.straggler import StragglerCheck, StragglerPrecheck, StragglerReport

#: Pods to check; 1 for a local run. Set STRAGGLER_NNODES when registering for a cluster.
NNODES = int(os.environ.get("STRAGGLER_NNODES", "1"))


@task(
    task_config=StragglerPrecheck(
        nnodes=NNODES,
        nproc_per_node=1,
        check=StragglerCheck(threshold=1.3, action="warn"),
    ),
    container_image=image_from_environment(),
)
def precheck() -> StragglerReport:
    """Body not run: the task returns the check's report (see StragglerPrecheck)."""
    ...


@task
def gate(report: StragglerReport) -> str:
    """Stop here if the check flagged nodes; a real workflow would train next."""
    if report.flagged:
        raise RuntimeError(report.summary())
    return report.summary()


@workflow
def precheck_then_train() -> str:
    return gate(report=precheck())
