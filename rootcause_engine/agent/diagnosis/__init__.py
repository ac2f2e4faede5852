"""The diagnosis step, in the agent process: from what the launch left behind to the root cause.

One pipeline (:mod:`.pipeline`): a :class:`~rootcause_engine.agent.launch_record.LaunchRecord`
(every worker's recorded error, observed exit and probe answer, the teardown times) and the peer
pods' word go in; :mod:`.selection` turns each failed worker into a :class:`.failures.WorkerFailure`
and ranks them with the shared rule (:mod:`.hang` names a rank that hung); :mod:`.report` writes
the text; a :class:`.pipeline.Diagnosis` comes out. Every road to a report (torch's failure, a
lost store, the agent watchdog, a soft restart) calls :func:`.pipeline.diagnose`.

May import: the shared core, the engine's worker records (:mod:`rootcause_engine.worker.recorder`)
and the agent's observers (what they saw). No front-end: the flytekit plugin turns a diagnosis
into its exception (``flytekitplugins_rootcause.exceptions.root_cause_error``) and its Deck. Pure
where it can be: ranking and report text are tested without processes.
"""
