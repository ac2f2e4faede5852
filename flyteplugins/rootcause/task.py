"""``RootCauseTorchFunctionTask``: Flyte 2's ``TorchFunctionTask`` that reports the job's true first failure.

Upstream's task reports whatever failure torch found first, and its watchdog ends a pod without a
word. This task keeps upstream's serialization, ``pre`` and worker entrypoint. It runs the same
``elastic_launch`` inside the engine's observers
(:class:`rootcause_engine.agent.launch_session.LaunchSession`, as the flytekit flavour does). Flyte 2
reads one ``error.pb`` per action, written by every pod. So the failing pods agree on one report, and
every pod raises the same exception. Before the launch, the pod decides once whether the diagnosis
can run. If not, upstream's ``TorchFunctionTask.execute`` runs instead. ``docs/flyte2.md`` lists the
steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import tempfile
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import flyte
from cloudpickle import cloudpickle
from flyte.extend import TaskPluginRegistry
from flyte.models import SerializationContext
from flyteplugins.pytorch.task import TorchFunctionTask, launcher_entrypoint
from torch.distributed import DistError
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from flyteplugins.rootcause.action_outputs import ActionOutputs
from flyteplugins.rootcause.config import ElasticRootCause
from flyteplugins.rootcause.exceptions import AgentHungError, root_cause_error
from flyteplugins.rootcause.rank_0_outputs import await_rank_0_outputs
from flyteplugins.rootcause.report import add_straggler_tab, publish_readiness, publish_restarts, publish_timeline
from flyteplugins.rootcause.root_cause_adoption import error_to_write
from flyteplugins.rootcause.straggler import read_published_report, straggler_check_hook
from flyteplugins.rootcause.upstream import (
    flyte_readiness,
    in_pod_main_process,
    internal_ctx,
    leave_outputs_to_rank_0,
    note_error_document_written,
    run_by_rootcause_runtime,
    upload_error_document,
)
from rootcause_core.pod_stop import POD_STOP
from rootcause_core.store_retry import Deadline, GaveUp, call_with_retries, deadline_inside
from rootcause_core.worker_names import current_worker_name
from rootcause_engine.agent.agreement import job_report
from rootcause_engine.agent.diagnosis.agreed import AgreedReport
from rootcause_engine.agent.diagnosis.pipeline import Diagnosis
from rootcause_engine.agent.diagnosis.selection import RetryRule
from rootcause_engine.agent.failure_sink import DEFAULT_SINK_TIMEOUT_S, failure_sink
from rootcause_engine.agent.launch_session import RENDEZVOUS_ENDPOINT_VARIABLE, LaunchSession, LaunchSettings
from rootcause_engine.agent.peer_watch import PeerWatch
from rootcause_engine.upstream.readiness import PatchesNotApplied, Readiness, enter_all
from rootcause_engine.worker.process_settings import WorkerProcessSettings, agent_environment, before_user_function
from rootcause_engine.worker.recorder import RecordingTaskFunction

logger = logging.getLogger(__name__)

# the task's signature types (flyte's own are private names, which a release may move)
P = ParamSpec("P")
R = TypeVar("R")

#: Which root causes Flyte 2 retries: every error but a ``NonRecoverableError`` (the launch's
#: diagnoses, soft restarts and the agreement all judge by it).
RETRY_RULE = RetryRule.UNLESS_REFUSED

if in_pod_main_process():
    # Noted from the first line where ``rootcause-a0`` runs the pod (:mod:`.runtime`, the task's own
    # container args); where plain ``a0`` does, from here on: ``a0`` loads the task before it
    # downloads the inputs, and the launch then ends as stopped as it starts
    # (:mod:`rootcause_engine.agent.termination`), where Python's default would end the pod non-zero
    # and fail the job with nothing to read.
    POD_STOP.install()

#: torch elastic's start method for the workers: upstream's (``LaunchConfig``'s default).
START_METHOD = "spawn"


@dataclasses.dataclass(kw_only=True)
class RootCauseTorchFunctionTask(TorchFunctionTask):
    """Runs like ``TorchFunctionTask``; on failure every pod raises the job's agreed root cause."""

    plugin_config: ElasticRootCause

    async def execute(self, *args: P.args, **kwargs: P.kwargs) -> R:
        readiness = flyte_readiness(self.plugin_config.restart_policy)
        if readiness.diagnosis_on and internal_ctx().data.task_context.mode == "local":
            return self.func(*args, **kwargs)  # upstream's local run: the function once, no launch
        if readiness.diagnosis_on:
            try:
                return await self._observed_execute(readiness, *args, **kwargs)
            except PatchesNotApplied as failed:
                readiness = readiness.turned_off(failed.reason)
        return await self._upstream_execute(readiness, *args, **kwargs)

    async def _upstream_execute(self, readiness: Readiness, *args: P.args, **kwargs: P.kwargs) -> R:
        """Upstream's own ``execute``: what plain ``Elastic`` runs, for a pod whose diagnosis is off
        (``readiness`` says why, in the log and the report)."""
        readiness.announce()
        POD_STOP.release()  # the kubelet's SIGTERM does what it does without the plugin
        try:
            return await TorchFunctionTask.execute(self, *args, **kwargs)
        finally:
            if self.report:
                await publish_readiness(readiness)

    async def _observed_execute(self, readiness: Readiness, *args: P.args, **kwargs: P.kwargs) -> R:
        """The launch inside the engine's observers; raises :class:`PatchesNotApplied` (before any
        worker starts) when applying them failed."""
        readiness.announce()
        ctx = internal_ctx()
        tctx = ctx.data.task_context
        tctx = tctx.replace(data=await self.pre(*args, **kwargs))
        with ctx.replace_task_context(tctx), failure_sink(
            lambda error: _upload_last_resort(error, tctx.output_path), destination=tctx.output_path
        ):
            launch = LaunchSession(
                self._launch_settings(readiness),
                error_of=lambda diagnosis: _job_error(diagnosis, launch.peers, self, launch.settings.notes),
                board=ActionOutputs(tctx.output_path).board() if tctx.output_path else None,
            )
            scratch_dir = tempfile.TemporaryDirectory(prefix="rootcause-straggler-")
            with contextlib.ExitStack() as session, scratch_dir as scratch:
                enter_all(session, (launch,))
                patches = contextlib.ExitStack()
                straggler_file = os.path.join(scratch, "report.json")  # the check's report, from rank 0
                try:
                    # a SIGTERM that came before the launch raises here, to be diagnosed below
                    enter_all(patches, (launch.running(),), passthrough=(SignalException,))
                    with patches:
                        out = elastic_launch(self._launch_config(), entrypoint=launcher_entrypoint)(
                            tctx, cloudpickle.dumps(self._recording(straggler_file)), kwargs
                        )
                except PatchesNotApplied:
                    raise
                except ChildFailedError as exc:
                    diagnosis = launch.workers_failed(exc)
                    if diagnosis is None:
                        raise
                    raise await self._raised(launch, diagnosis, straggler_file, tctx.output_path) from None
                except (RendezvousError, DistError) as exc:
                    raise await self._raised(launch, launch.store_lost(exc), straggler_file, tctx.output_path) from None
                except SignalException:
                    # the kubelet stopped this pod (torch's agent turned its SIGTERM into this): the
                    # stop is the job's recoverable root cause, written before the pod exits
                    diagnosis = launch.stopped()
                    if diagnosis is None:
                        raise
                    raise await self._raised(launch, diagnosis, straggler_file, tctx.output_path) from None
                except Exception as exc:
                    # torch's agent failed otherwise (its own report of the failed workers could not
                    # be built): this pod's failed workers are still the diagnosis, if there are any
                    diagnosis = launch.agent_failed(exc)
                    if diagnosis is None:
                        raise
                    raise await self._raised(launch, diagnosis, straggler_file, tctx.output_path) from None
                restarts = launch.restarts()
                if self.report and restarts:
                    self._add_straggler_tab(straggler_file)
                    await publish_restarts(restarts)
                if self.report:
                    await publish_readiness(readiness)
            # rank 0 returns the task's output; a pod without it leaves outputs.pb to rank 0's, once
            # rank 0's pod wrote it (waited for before the marking, after which error.pb is not written)
            if 0 not in out:
                await await_rank_0_outputs(tctx.output_path, launch.peers, self.plugin_config.rank_0_outputs_timeout_s)
            result = out[0] if 0 in out else leave_outputs_to_rank_0(out)
            await self.post(result)
        return result

    def container_args(self, serialize_context: SerializationContext) -> list[str]:
        """flyte's own args, run by ``rootcause-a0`` (:mod:`flyteplugins.rootcause.runtime`) instead of
        ``a0``: a pod the kubelet stops while it starts is then the recorded, recoverable root cause,
        not an exit 143 that fails the job with nothing to read."""
        return run_by_rootcause_runtime(super().container_args(serialize_context))

    def _recording(self, straggler_file: str) -> RecordingTaskFunction:
        """What each worker runs: the user's function, recorded, after the worker-side settings and
        the straggler check (if any; rank 0 leaves its report in ``straggler_file``)."""
        config = self.plugin_config
        settings = WorkerProcessSettings(collective_timeout_s=config.collective_timeout_s, hang_probe=config.hang_probe)
        hooks: list[Callable[[], None] | None] = [settings]
        if config.straggler_check is not None:
            hooks.append(straggler_check_hook(config.straggler_check, config.nnodes, straggler_file, self.report))
        return RecordingTaskFunction(self.func, before_user_function(hooks))

    @staticmethod
    def _add_straggler_tab(straggler_file: str) -> None:
        """Before this process flushes its report: the check's tab, where this pod's rank 0 wrote one
        (rank 0 flushed it itself; this process's flush would replace that page)."""
        report = read_published_report(straggler_file)
        if report is not None:
            add_straggler_tab(report)

    def _launch_config(self) -> LaunchConfig:
        """torch's launch config, as upstream builds it (the monitor interval may be below a second)."""
        config = self.plugin_config
        return LaunchConfig(
            run_id=flyte.ctx().action.run_name,
            min_nodes=self.min_nodes,
            max_nodes=self.max_nodes,
            nproc_per_node=config.nproc_per_node,
            rdzv_backend=config.rdzv_backend,
            rdzv_configs=config.rdzv_configs,
            rdzv_endpoint=os.environ.get(RENDEZVOUS_ENDPOINT_VARIABLE, "localhost:0"),
            max_restarts=config.max_restarts,
            monitor_interval=config.monitor_interval,
            start_method=START_METHOD,
        )

    def _launch_settings(self, readiness: Readiness | None = None) -> LaunchSettings:
        """The engine's view of this task's config; ``readiness``'s warnings go in every report."""
        return LaunchSettings.of(
            self.plugin_config,
            min_nodes=int(self.min_nodes),
            max_nodes=int(self.max_nodes),
            start_method=START_METHOD,
            rdzv_backend=self.plugin_config.rdzv_backend,
            environment=agent_environment(_EngineEnvironment.of(self.plugin_config)),
            retry_rule=RETRY_RULE,
            notes=readiness.lines if readiness is not None else (),
        )

    async def _raised(
        self, launch: LaunchSession, diagnosis: Diagnosis, straggler_file: str, output_path: str
    ) -> BaseException:
        """The exception this pod raises for ``diagnosis``: the job's agreed report, after the report
        tabs; a report naming only victims gives way to a root cause another pod's ``error.pb``
        names (:mod:`.root_cause_adoption`: this pod's write then leaves that document as it is)."""
        own = _job_error(diagnosis, launch.peers, self, launch.settings.notes)
        logger.error("Root cause of the elastic launch failure (this pod's view):\n%s", diagnosis.report)
        error = await asyncio.to_thread(error_to_write, own, output_path, self.plugin_config.root_cause_wait_s)
        # written here, retried within a deadline; the runtime then leaves it (run_flyte_runtime)
        deadline = Deadline(deadline_inside(DEFAULT_SINK_TIMEOUT_S))
        await asyncio.to_thread(_write_error_document, error, output_path, deadline)
        agreed = getattr(error, "agreed", None)
        if isinstance(agreed, AgreedReport) and self.report:
            self._add_straggler_tab(straggler_file)
            await publish_readiness(Readiness(not_verified=launch.settings.notes))  # the diagnosis is on
            await publish_timeline(agreed, launch.restarts())
        return error


def _upload_last_resort(error: BaseException, output_path: str) -> None:
    """The watchdog's ``error.pb``, retried as the flytekit entrypoint retries its writes
    (:mod:`rootcause_core.store_retry`: backoff with jitter while the store answers "not now"), under
    a deadline that ends before the failure sink abandons the writer, so a failure is reported with
    its tries (``GaveUp``) rather than cut off."""
    deadline = Deadline(deadline_inside(DEFAULT_SINK_TIMEOUT_S))
    error = error_to_write(error, output_path, deadline.remaining_s() / 2)
    call_with_retries(functools.partial(upload_error_document, error, output_path), deadline)


def _write_error_document(error: BaseException, output_path: str, deadline: Deadline) -> bool:
    """``error``'s ``error.pb``, as the runtime writes it, retried while the store answers "not now" and
    within ``deadline`` (the pod's document must be there at the training operator's decision, and a
    stopped pod has 30 s): ``True`` once written, and the runtime's own write is skipped; ``False``
    (logged) when every try failed, and the runtime tries once more after the task raised."""
    try:
        call_with_retries(functools.partial(upload_error_document, error, output_path), deadline)
    except GaveUp as gave_up:
        logger.warning("this pod's error.pb could not be written (%s): the runtime tries once more", gave_up)
        return False
    note_error_document_written(output_path)
    return True


def _job_error(diagnosis: Diagnosis, peers: PeerWatch, task: RootCauseTorchFunctionTask,
               notes: tuple[str, ...] = ()) -> Exception:
    """The job's exception for this pod's ``diagnosis``: agreed with the other failing pods (also what
    the agent watchdog hands the failure sink before it ends the pod); ``notes`` (an upstream version
    not verified here) end its message, as they end this pod's own report."""
    agreed = job_report(
        diagnosis,
        peers,
        worker=current_worker_name(),
        timeout_s=task.plugin_config.agreement_timeout_s,
        retry_rule=RETRY_RULE,
    )
    if agreed is None:
        return AgentHungError(diagnosis)
    if notes:
        agreed = dataclasses.replace(agreed, message="\n\n".join((agreed.message, *notes)))
    return root_cause_error(agreed)


@dataclasses.dataclass(frozen=True)
class _EngineEnvironment:
    """The engine's agent-environment settings of a Flyte 2 config.

    ``Elastic``'s NCCL fields differ from the engine's: its async error handling is a flag (on: mode 1,
    which the soft policy turns into 2; off: torch's default), its heartbeat timeout is
    ``nccl_heartbeat_timeout_sec``. Upstream's ``pre`` applies them too; the engine applies them first
    so that a soft-restart launch gets its clean-up-only mode.
    """

    nccl_heartbeat_timeout_s: int | None
    nccl_async_error_handling: int | None
    nproc_per_node: int
    unbuffered_output: bool
    flight_recorder_entries: int | None
    restart_policy: str
    max_restarts: int
    hang_after_s: float | None  # each worker's progress beacon, for the hang watch

    @classmethod
    def of(cls, config: ElasticRootCause) -> _EngineEnvironment:
        return cls(
            nccl_heartbeat_timeout_s=config.nccl_heartbeat_timeout_sec,
            nccl_async_error_handling=1 if config.nccl_async_error_handling else None,
            nproc_per_node=config.nproc_per_node,
            unbuffered_output=config.unbuffered_output,
            flight_recorder_entries=config.flight_recorder_entries,
            restart_policy=config.restart_policy,
            max_restarts=config.max_restarts,
            hang_after_s=config.hang_after_s,
        )


# Flyte 2 finds a task class by the config's exact type (a dict lookup): ours is registered for ours.
TaskPluginRegistry.register(config_type=ElasticRootCause, plugin=RootCauseTorchFunctionTask)
