"""An ``ElasticRootCause`` task whose rank 1 raises an exception with a hostile message.

``ROOTCAUSE_TEST_HOSTILE`` picks the message (see :data:`HOSTILE_MESSAGES`); the agent launches two
real torch elastic workers, rank 0 lingers until the agent tears it down (a victim).
"""

from __future__ import annotations

import os
import time

from flytekit import task

from flytekitplugins_rootcause import ElasticRootCause
from tests.start_method import START_METHOD

#: 5 MB: more than torch's 4 MB error-file limit and propeller's 2 MB payload limit.
HUGE_MESSAGE_BYTES = 5 * 1024 * 1024
HUGE_HEAD = "HEAD-OF-THE-HUGE-MESSAGE"
HUGE_TAIL = "TAIL-OF-THE-HUGE-MESSAGE"

#: What rank 1 raises ``ValueError`` with, by case name (the three cases of issue #15).
HOSTILE_MESSAGES = {
    "control": "bad record \x00\x07\x08 end",
    "surrogate": "half \udc80 surrogate",
    "huge": HUGE_HEAD + "x" * HUGE_MESSAGE_BYTES + HUGE_TAIL,
}


@task(task_config=ElasticRootCause(start_method=START_METHOD, nnodes=1, nproc_per_node=2, teardown_grace_s=2.0))
def rank_one_raises_hostile(x: int) -> int:
    """Rank 1 raises ``ValueError`` with the chosen hostile message; rank 0 waits to be torn down."""
    if int(os.environ["RANK"]) == 1:
        raise ValueError(HOSTILE_MESSAGES[os.environ["ROOTCAUSE_TEST_HOSTILE"]])
    time.sleep(120)
    return x
