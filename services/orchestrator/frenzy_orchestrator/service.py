"""Orchestrator service: the Kafka and gRPC shell around `OrchestratorCore`."""
from __future__ import annotations

import asyncio
import time

from opentelemetry import context as otel_context

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import ServiceSettings
from frenzy.events import MalformedEvent, submitted_job_id
from frenzy.jobstates import TERMINAL
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
from frenzy.security.limits import job_id_problem
from frenzy.security.wiring import orchestrator_security
from frenzy.statestore import read_state
from frenzy.v1 import events_pb2, types_pb2
from frenzy_orchestrator.api import start_grpc
from frenzy_orchestrator.core import OrchestratorCore, Outgoing
from frenzy_orchestrator.metrics import OrchestratorMetrics

GROUP = "frenzy-orchestrator"
HEARTBEAT_GROUP = "frenzy-orchestrator-heartbeats"
log = get_logger("orchestrator")


class OrchestratorService:
    def __init__(self, bus: Bus, settings: ServiceSettings) -> None:
        self.bus = bus
        self.settings = settings
        self.core = OrchestratorCore(settings.node_timeout_s, settings.max_retries,
                                     launch_timeout_s=settings.launch_timeout_s,
                                     plan_timeout_s=settings.plan_timeout_s,
                                     cleanup_forget_s=settings.checkpoint_cleanup_forget_s)
        self.metrics = OrchestratorMetrics(self.core)
        self._errors_observed = 0  # memory prediction errors already in the histogram
        self.watchers: dict[str, list[asyncio.Queue]] = {}
        self._pending: list[Outgoing] = []  # produced by handled events, not yet published
        # The trace context of the event that produced each pending output (frenzy/tracing.py).
        self._pending_contexts: list[otel_context.Context] = []
        self._flush_lock = asyncio.Lock()
        # Authentication, signed records and TLS (frenzy/security); off without a security dir.
        self.security = orchestrator_security(settings)
        if self.security.guard is not None:
            self.bus.signer = self.security.guard.signer

    async def recover(self) -> None:
        """Rebuild jobs and allocations from the state topic before taking any event."""
        started_s = time.monotonic()
        state = await read_state(self.bus.bootstrap, self.bus.producer,
                                 self.bus.topic_name(topics.ORCHESTRATOR_STATE),
                                 topics.ORCHESTRATOR_STATE.partitions,
                                 client_options=self.bus.client_options)
        saved_epoch = state.get("meta/epoch")
        epoch = (saved_epoch.orchestrator_epoch.epoch if saved_epoch else 0) + 1
        await self.bus.publish(topics.ORCHESTRATOR_STATE, "meta/epoch",
                               events_pb2.OrchestratorEpoch(epoch=epoch))
        self.core.epoch = epoch
        jobs = [env.job_record_state for key, env in state.items() if key.startswith("job/")]
        early = [env.job_planned for key, env in state.items() if key.startswith("early/")]
        self.core.restore(jobs, early, time.time())
        self._errors_observed = len(self.core.memory_errors)
        active = sum(1 for r in self.core.jobs.values() if r.job.state not in TERMINAL)
        log.info("state recovered", epoch=epoch, jobs=len(jobs), active_jobs=active,
                 early_plans=len(early), took_s=round(time.monotonic() - started_s, 3))

    async def _run(self, handler, *args, job_id: str = "") -> None:
        """Apply one event to the core. Its outgoing events wait for the next flush().

        If the handler raises on a job's event, the job ends FAILED with the error as its reason
        (the record still goes to the dead-letter topic when even that fails): an input nobody
        foresaw must not park a job, and its GPUs, forever.
        """
        try:
            produced = list(handler(*args, time.time()))
        except Exception as err:
            if not job_id:
                raise
            log.exception("handler failed; ending the job", job_id=job_id, handler=handler.__name__)
            reason = f"internal error in {handler.__name__}: {type(err).__name__}: {err}"[:300]
            produced = list(self.core.fail(job_id, reason, time.time()))
        self._queue(produced)

    def _queue(self, produced: list[Outgoing]) -> None:
        """Hold events for the next flush, each with the trace context it was produced in."""
        self._pending.extend(produced)
        self._pending_contexts.extend([otel_context.get_current()] * len(produced))

    async def flush(self) -> None:
        """Publish what the handled events produced, and only then their state records.

        Consumers call this before committing offsets, so a crash before it redelivers the input
        events; gRPC calls it before answering. One flush pipelines many records into a couple
        of broker round trips instead of one per record.
        """
        async with self._flush_lock:  # keeps publish order equal to state-change order
            outgoing, self._pending = self._pending, []
            contexts, self._pending_contexts = self._pending_contexts, []
            records = self.core.drain_state_records()
            for gpu_type, error in self.core.memory_errors[self._errors_observed:]:
                self.metrics.memory_prediction_error.labels(gpu_type).observe(error)
            self._errors_observed = len(self.core.memory_errors)
            await self.bus.publish_many([(o.topic, o.key, o.payload) for o in outgoing], contexts)
            # State records go last: see OrchestratorCore.drain_state_records.
            await self.bus.publish_many([(o.topic, o.key, o.payload) for o in records])
            for out in outgoing:
                if isinstance(out.payload, events_pb2.JobStatusChanged):
                    self._notify(out.key, out.payload.job)

    def _notify(self, job_id: str, job: types_pb2.Job) -> None:
        log.info("job state", job_id=job_id, state=types_pb2.JobState.Name(job.state),
                 reason=job.reason, attempt=job.attempt)
        for queue in self.watchers.get(job_id, []):
            snapshot = types_pb2.Job()
            snapshot.CopyFrom(job)
            queue.put_nowait(snapshot)

    # Entry points from gRPC.
    async def submit(self, job_id: str, spec: types_pb2.JobSpec, tenant: str = "") -> None:
        submitted = events_pb2.JobSubmitted(job_id=job_id, spec=spec, tenant=tenant)
        submitted.submitted_at.GetCurrentTime()
        await self.bus.publish(topics.JOBS_SUBMITTED, job_id, submitted, trace_id=job_id)
        self._queue(self.core.submit(job_id, spec, time.time(), tenant))
        await self.flush()

    async def cancel(self, job_id: str) -> None:
        await self._run(self.core.cancel, job_id)
        await self.flush()

    # Kafka handlers.
    async def on_submitted(self, env: events_pb2.Envelope, key: str) -> None:
        submitted = env.job_submitted
        problem = job_id_problem(submitted_job_id(env))
        if problem:  # a job id names a directory on every agent: never one with a '/'
            raise MalformedEvent(f"job_id: {problem}")
        if submitted.attempt == 0:  # attempts > 0 are this service's own re-plan requests
            job_id = submitted_job_id(env)
            before = len(self._pending)
            await self._run(self._submit, job_id, submitted.spec, submitted.tenant, job_id=job_id)
            registered = self._pending[before:]
            guard = self.security.guard
            if guard is not None and env.event_id in guard.accepted_pipeline_events:
                # A pipeline's record, verified: published again, signed by us, for the planner.
                guard.accepted_pipeline_events.discard(env.event_id)
                if registered:
                    again = events_pb2.JobSubmitted(job_id=job_id, spec=submitted.spec,
                                                    tenant=submitted.tenant,
                                                    submitted_at=submitted.submitted_at)
                    self._queue([Outgoing(topics.JOBS_SUBMITTED, job_id, again)])

    def _submit(self, job_id: str, spec, tenant: str, now_s: float) -> list[Outgoing]:
        return self.core.submit(job_id, spec, now_s, tenant)

    async def on_planned(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_planned, env.job_planned, job_id=env.job_planned.job_id)

    async def on_placed(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_placed, env.job_placed, job_id=env.job_placed.job_id)

    async def on_held(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_held, env.held_placements)

    async def on_reshape(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_reshape, env.reshape_job, job_id=env.reshape_job.job_id)

    async def on_status(self, env: events_pb2.Envelope, key: str) -> None:
        if env.job_status_changed.source == events_pb2.AGENT:
            await self._run(self.core.on_agent_status, env.job_status_changed,
                            job_id=env.job_status_changed.job_id)

    async def on_agent_join(self, env: events_pb2.Envelope, key: str) -> None:
        if self.security.guard is not None:
            refused = self.security.guard.join(env.agent_join)
            if refused:
                raise MalformedEvent(refused)  # dead-lettered with the reason

    async def on_heartbeat(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_heartbeat, env.node_heartbeat)
        lag_s = time.time() - env.produced_at.ToNanoseconds() / 1e9
        self.metrics.heartbeat_lag_s.observe(max(0.0, lag_s))

    async def on_checkpoints_deleted(self, env: events_pb2.Envelope, key: str) -> None:
        ack = env.checkpoints_deleted
        log.info("checkpoint delete acknowledged", job_id=ack.job_id, node_id=ack.node_id,
                 removed=ack.removed, note=ack.note)
        await self._run(self.core.on_checkpoints_deleted, ack)

    async def liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.node_timeout_s / 4))
            await self._run(self.core.check_liveness)
            await self._run(self.core.check_deadlines)
            await self._run(self.core.retry_cleanup)
            await self.flush()

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.start()
        await self.recover()
        if self.settings.metrics_port:
            self.metrics.serve(self.settings.grpc_host, self.settings.metrics_port)
        server = await start_grpc(self, self.settings.grpc_host, self.settings.grpc_port,
                                  self.security.auth, self.security.tls)
        verify = self.security.guard.verify if self.security.guard is not None else None
        try:
            # Job events and heartbeats have separate consumers: a flood of heartbeats never
            # queues ahead of a placement, and heartbeats are fetched in larger, rarer batches.
            # Placements are urgent: handled ahead of the status reports fetched with them, and
            # their LaunchJobs flushed at once (docs/architecture.md, "Reaction latency").
            jobs = self.bus.consumer(GROUP, topics.JOBS_SUBMITTED, topics.JOBS_PLANNED,
                                     topics.JOBS_PLACED, topics.JOBS_STATUS)
            handlers = {"job_submitted": self.on_submitted, "job_planned": self.on_planned,
                        "job_placed": self.on_placed, "held_placements": self.on_held,
                        "reshape_job": self.on_reshape,
                        "job_status_changed": self.on_status}
            consume_jobs = asyncio.create_task(self.bus.run_consumer(
                jobs, GROUP, handlers,
                json_payloads={topics.JOBS_SUBMITTED.name: "job_submitted"},
                before_commit=self.flush, verify=verify, urgent=(topics.JOBS_PLACED,)))
            heartbeats = self.bus.consumer(
                HEARTBEAT_GROUP, topics.NODES_HEARTBEATS,
                fetch_max_wait_ms=self.settings.heartbeat_fetch_max_wait_ms,
                fetch_min_bytes=self.settings.heartbeat_fetch_min_bytes)
            consume_heartbeats = asyncio.create_task(self.bus.run_consumer(
                heartbeats, HEARTBEAT_GROUP,
                {"node_heartbeat": self.on_heartbeat, "agent_join": self.on_agent_join,
                 "checkpoints_deleted": self.on_checkpoints_deleted},
                before_commit=self.flush, verify=verify))
            log.info("orchestrator started", grpc=f"{self.settings.grpc_host}:{self.settings.grpc_port}")
            await run_until_stopped(stop, consume_jobs, consume_heartbeats,
                                    asyncio.create_task(self.liveness_loop()))
        finally:
            await server.stop(grace=1)
            await self.bus.stop()


def main() -> None:
    settings = ServiceSettings()
    run_service(lambda stop: OrchestratorService(Bus("orchestrator", settings), settings).run(stop))
