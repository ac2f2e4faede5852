"""flytekitplugins-rootcause: distributed PyTorch tasks that report their true root-cause failure.

.. code-block:: python

    from flytekitplugins_rootcause import ElasticRootCause

    @task(task_config=ElasticRootCause(nnodes=2, nproc_per_node=4))
    def train() -> float: ...
"""

from flytekitplugins_rootcause.config import ElasticRootCause
from flytekitplugins_rootcause.exceptions import ElasticRootCauseError, ElasticRootCauseRecoverableError
from flytekitplugins_rootcause.failures import WorkerFailure
from flytekitplugins_rootcause.task import ElasticRootCauseFunctionTask

__all__ = [
    "ElasticRootCause",
    "ElasticRootCauseError",
    "ElasticRootCauseFunctionTask",
    "ElasticRootCauseRecoverableError",
    "WorkerFailure",
]
