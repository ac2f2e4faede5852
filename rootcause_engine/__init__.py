"""The pod-side engine: everything that runs in the torch elastic agent and in its workers.

It records each worker's failure (``worker/``), watches the workers die and the peer pods beat
(``agent/``), probes hung ranks, tears an attempt down, runs soft restarts, and turns what it saw
into a diagnosis (``agent/diagnosis/``). It imports torch and ``rootcause_core``, never flytekit
or flyte: a front-end (the flytekit plugin, ``flytekitplugins_rootcause``) turns the engine's
:class:`~rootcause_engine.agent.diagnosis.pipeline.Diagnosis` into its own exception, error
document and report. ``tests/test_architecture.py`` checks that importing any engine module
imports no front-end.
"""
