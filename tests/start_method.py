"""How the test-only elastic tasks start their workers: ``fork``.

A spawned worker is a fresh interpreter that imports torch, flytekit and the task's module again,
about 6 s of CPU on this 2-core machine, and these tests launch dozens of them: that alone kept the
suite over 10 minutes beside one busy process. A forked worker starts with what its agent already
imported. ``fork`` is a start method torch and this plugin support (its hazards have their own
tests: ``tests/scenarios/test_fork_start.py``, and ``benchmarks/stress_teardown.py`` runs both methods),
and what the agent makes of a worker's failure does not depend on how the worker was started.

``spawn``, kfpytorch's default and what most users run, stays covered end to end: the README demo
and the PyTorchJob simulation of an abort beside a peer (``tests/scenarios/``; the other fault
kinds run the same loop forked, ``tests/elastic_tasks/forked_training.py``, and
``benchmarks/e2e.py`` runs every kind spawned), the examples under ``pyflyte run``, the
teardown-grace tests, the serialized-command test, the straggler pre-check task, and the first
launch test (``scenarios.rank_raises``): a spawned survivor dies of the teardown's SIGTERM, a
forked one runs the handler it inherited from the agent and exits 1 with torch's
``SignalException``; both are victims.

A hazard seen under load, now closed: a forked worker of the pod that hosts the rendezvous store
a few times never returned from creating its TCPStore client (``_create_c10d_store``, or
``WorkerInfo.get_pg_parameters`` under soft restarts). Its native stack (py-spy --native):
``TCPStore::TCPStore -> Socket::connect -> getaddrinfo -> __resolv_context_get ->
__lll_lock_wait_private``, a futex wait on glibc's resolver lock, which torch's store server (a
thread of that agent, reverse-resolving every peer it accepts) held at the fork. With ``fork`` the
store now runs in a keeper process (``rootcause_engine/agent/store_keeper.py``), so the
agent that forks has no store thread; ``tests/rootcause_engine/agent/test_store_keeper.py`` checks that.
"""

from __future__ import annotations

START_METHOD = "fork"
