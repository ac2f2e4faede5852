"""Code that runs in each pod's torch elastic agent (the task's ``_execute``), around the launch.

- :mod:`.launch_observer`: wraps torch's agent to see every worker it starts and every teardown;
- :mod:`.launch_ledger`: the launch's workers and the moments of its teardowns and phases;
- :mod:`.worker_ends`: how each worker ended, from the kernel and from torch's bookkeeping;
- :mod:`.worker_teardown`: the teardown policy (probe, SIGTERM, grace, SIGKILL);
- :mod:`.death_watcher`: exact exit times of worker pids (pidfd, without reaping);
- :mod:`.teardown`: SIGTERM, grace, SIGKILL by pid;
- :mod:`.watchdog`: ends a hung agent with the root-cause report;
- :mod:`.failure_sink`: where the watchdog hands a last-resort error to the entrypoint;
- :mod:`.torch_log_format`: keeps torch's log formatter from importing the compiler on a failure.

May import: the shared core, torch, :mod:`rootcause_engine.agent.diagnosis` (the watchdog
diagnoses before it ends a launch) and :mod:`rootcause_engine.upstream` (every patch of
torch internals). Never the entrypoint package.
"""
