"""The diagnosis step, in the agent process: from what the launch left behind to the root cause.

Flow: :mod:`.evidence` gathers each worker's testimony (recorded error file, observed exit,
teardown times) -> :mod:`.selection` turns it into :class:`.failures.WorkerFailure` records and
ranks them with the shared rule -> :mod:`.root_cause` picks the root cause and builds the
``ElasticRootCause*Error`` (:mod:`flytekitplugins_rootcause.exceptions`) whose message is
:mod:`.report`'s text; :mod:`.deck` draws the same failures as a Flyte Deck timeline.

May import: the shared core, :mod:`flytekitplugins_rootcause.worker.recorder` (to read its files),
the agent's observers (:mod:`..launch_observer`, :mod:`..death_watcher`: what they saw) and
:mod:`flytekitplugins_rootcause.exceptions`. Pure where it can be: ranking and report text are tested
without processes.
"""
