"""The engine's seam with torch internals: the one place that touches them. Torch may rename or
drop any internal in any release, and a plugin broken by that must never fail a training. So every
torch symbol the engine patches or reads privately is reached only through this package, and each is
listed below. The front-end's seam with flytekit and kfpytorch is ``flytekitplugins_rootcause.upstream``.
One check up front (:mod:`.readiness`) turns the diagnosis on, on with a warning, or off.
``docs/upstream.md`` says how the check, the patching and the verified versions work.

- :mod:`.torch_elastic` (the agent; torch):
  ``torch.distributed.elastic.agent.server.local_elastic_agent.start_processes`` (replaced for a
  launch); ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._rendezvous``
  and ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._exit_barrier``
  (wrapped for a launch); after a rendezvous, ``torch.distributed.elastic.agent.server.api.WorkerGroup.store``,
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.group_rank``,
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.group_world_size``,
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.workers`` and
  ``torch.distributed.elastic.agent.server.api.Worker.global_rank`` (read, for the peer watch);
  ``torch.distributed.elastic.multiprocessing.api.PContext.close`` (wrapped
  per attempt); ``torch.distributed.elastic.multiprocessing.api.PContext.pids``,
  ``torch.distributed.elastic.multiprocessing.api.PContext.envs``,
  ``torch.distributed.elastic.multiprocessing.api.PContext.error_files``,
  ``torch.distributed.elastic.multiprocessing.api.PContext.nprocs``,
  ``torch.distributed.elastic.multiprocessing.api.MultiprocessContext._pc``,
  ``torch.distributed.elastic.multiprocessing.api.MultiprocessContext._return_values``,
  ``torch.distributed.elastic.multiprocessing.api.MultiprocessContext._worker_finished_event``,
  ``torch.distributed.elastic.multiprocessing.api.SubprocessContext.subprocess_handlers``,
  ``torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler.SubprocessHandler.proc``
  (read); ``torch.multiprocessing.spawn.ProcessContext.join`` (wrapped per attempt),
  ``torch.multiprocessing.spawn.ProcessContext.sentinels`` (read and reordered),
  ``torch.multiprocessing.spawn.ProcessContext.processes`` (read);
  ``torch.multiprocessing.spawn.ProcessExitedException`` (raised);
  ``torch.distributed.elastic.rendezvous.utils._matches_machine_hostname`` (called: would torch host
  the rendezvous store here?) and
  ``torch.distributed.elastic.rendezvous.dynamic_rendezvous.DynamicRendezvousHandler._create_tcp_store_server``
  (replaced for a forking launch: the workers' store runs in a keeper process);
  ``torch.distributed.elastic.multiprocessing.api._terminate_process_handler`` (replaced for a
  launch: the kubelet's SIGTERM is noted before torch acts on it) and
  ``torch.distributed.elastic.multiprocessing.api.SignalException`` (raised, as torch's handler does).
- :mod:`.torch_agent_loop` (the agent, ``restart_policy="soft"``; torch):
  ``torch.distributed.launcher.api.LocalElasticAgent`` (replaced for a launch by a subclass whose
  ``torch.distributed.elastic.agent.server.api.SimpleElasticAgent._invoke_run`` is overridden);
  ``torch.distributed.elastic.agent.server.api.SimpleElasticAgent._worker_group`` and
  ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._pcontext`` (read),
  ``torch.distributed.elastic.agent.server.api.SimpleElasticAgent._remaining_restarts`` (read and
  counted down); ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._start_workers``,
  ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._stop_workers`` and
  ``torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent._monitor_workers`` (called);
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.spec``,
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.master_addr``,
  ``torch.distributed.elastic.agent.server.api.WorkerGroup.master_port`` and
  ``torch.distributed.elastic.agent.server.api.WorkerSpec.rdzv_handler`` (read);
  ``torch.distributed.elastic.agent.server.api.Worker.local_rank``,
  ``torch.distributed.elastic.agent.server.api.Worker.role_rank``,
  ``torch.distributed.elastic.agent.server.api.Worker.world_size``,
  ``torch.distributed.elastic.agent.server.api.Worker.role_world_size`` and
  ``torch.distributed.elastic.agent.server.api.Worker.id`` (set, as each new world's ranks);
  for a pod that joins a running job without a rendezvous,
  ``torch.distributed.elastic.rendezvous.dynamic_rendezvous.DynamicRendezvousHandler._store`` (read:
  the job's store outside any round), ``torch.distributed.elastic.agent.server.api.SimpleElasticAgent._store``
  (set) and ``torch.distributed.elastic.agent.server.api.Worker`` (made).
- :mod:`.torch_worker` (each worker; torch):
  ``torch.distributed.elastic.multiprocessing.errors.error_handler.ErrorHandler._get_error_file_path``
  (called); ``torch.distributed.distributed_c10d.default_pg_timeout`` and
  ``torch.distributed.distributed_c10d.default_pg_nccl_timeout`` (set);
  ``torch._C._distributed_c10d._dump_fr_trace`` (called: the Flight Recorder's entries);
  ``torch.distributed.distributed_c10d._abort_process_group`` (called: an NCCL world left under soft
  restarts); ``torch.distributed.distributed_c10d.send`` and ``torch.distributed.distributed_c10d.recv``
  (wrapped, under that name and ``torch.distributed``'s: the peer an open call waits for);
  ``torch.distributed.distributed_c10d.init_process_group`` and
  ``torch.distributed.distributed_c10d.destroy_process_group`` (wrapped in soft-restart workers, both
  names: a group made with the RFC's API alone is left as ``reinitialize`` leaves it).
- :mod:`.torch_logging` (the agent; torch): ``torch._logging._internal.handlers`` (read).
"""
