"""Orchestrator service: the Kafka and gRPC shell around `OrchestratorCore`."""
from __future__ import annotations

import asyncio
import time

from opentelemetry import context as otel_context

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import ServiceSettings
from frenzy.events import submitted_job_id
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
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
        self.core = OrchestratorCore(settings.node_timeout_s, settings.max_retries)
        self.metrics = OrchestratorMetrics(self.core)
        self._errors_observed = 0  # memory prediction errors already in the histogram
        self.watchers: dict[str, list[asyncio.Queue]] = {}
        self._pending: list[Outgoing] = []  # produced by handled events, not yet published
        # The trace context of the event that produced each pending output (frenzy/tracing.py).
        self._pending_contexts: list[otel_context.Context] = []
        self._flush_lock = asyncio.Lock()

    async def recover(self) -> None:
        """Rebuild jobs and allocations from the state topic before taking any event."""
        started_s = time.monotonic()
        state = await read_state(self.bus.bootstrap, self.bus.producer,
                                 self.bus.topic_name(topics.ORCHESTRATOR_STATE),
                                 topics.ORCHESTRATOR_STATE.partitions)
        saved_epoch = state.get("meta/epoch")
        epoch = (saved_epoch.orchestrator_epoch.epoch if saved_epoch else 0) + 1
        await self.bus.publish(topics.ORCHESTRATOR_STATE, "meta/epoch",
                               events_pb2.OrchestratorEpoch(epoch=epoch))
        self.core.epoch = epoch
        jobs = [env.job_record_state for key, env in state.items() if key.startswith("job/")]
        early = [env.job_planned for key, env in state.items() if key.startswith("early/")]
        self.core.restore(jobs, early, time.time())
        self._errors_observed = len(self.core.memory_errors)
        active = sum(1 for r in self.core.jobs.values() if r.job.state not in (
            types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED))
        log.info("state recovered", epoch=epoch, jobs=len(jobs), active_jobs=active,
                 early_plans=len(early), took_s=round(time.monotonic() - started_s, 3))

    async def _run(self, handler, *args) -> None:
        """Apply one event to the core. Its outgoing events wait for the next flush()."""
        produced = list(handler(*args, time.time()))
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
    async def submit(self, job_id: str, spec: types_pb2.JobSpec) -> None:
        submitted = events_pb2.JobSubmitted(job_id=job_id, spec=spec)
        submitted.submitted_at.GetCurrentTime()
        await self.bus.publish(topics.JOBS_SUBMITTED, job_id, submitted, trace_id=job_id)
        await self._run(self.core.submit, job_id, spec)
        await self.flush()

    async def cancel(self, job_id: str) -> None:
        await self._run(self.core.cancel, job_id)
        await self.flush()

    # Kafka handlers.
    async def on_submitted(self, env: events_pb2.Envelope, key: str) -> None:
        submitted = env.job_submitted
        if submitted.attempt == 0:  # attempts > 0 are this service's own re-plan requests
            await self._run(self.core.submit, submitted_job_id(env), submitted.spec)

    async def on_planned(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_planned, env.job_planned)

    async def on_placed(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_placed, env.job_placed)

    async def on_status(self, env: events_pb2.Envelope, key: str) -> None:
        if env.job_status_changed.source == events_pb2.AGENT:
            await self._run(self.core.on_agent_status, env.job_status_changed)

    async def on_heartbeat(self, env: events_pb2.Envelope, key: str) -> None:
        await self._run(self.core.on_heartbeat, env.node_heartbeat)
        lag_s = time.time() - env.produced_at.ToNanoseconds() / 1e9
        self.metrics.heartbeat_lag_s.observe(max(0.0, lag_s))

    async def liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.node_timeout_s / 4))
            await self._run(self.core.check_liveness)
            await self.flush()

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.start()
        await self.recover()
        if self.settings.metrics_port:
            self.metrics.serve(self.settings.grpc_host, self.settings.metrics_port)
        server = await start_grpc(self, self.settings.grpc_host, self.settings.grpc_port)
        try:
            # Job events and heartbeats have separate consumers: a flood of heartbeats never
            # queues ahead of a placement, and heartbeats are fetched in larger, rarer batches.
            jobs = self.bus.consumer(GROUP, topics.JOBS_SUBMITTED, topics.JOBS_PLANNED,
                                     topics.JOBS_PLACED, topics.JOBS_STATUS)
            handlers = {"job_submitted": self.on_submitted, "job_planned": self.on_planned,
                        "job_placed": self.on_placed, "job_status_changed": self.on_status}
            consume_jobs = asyncio.create_task(self.bus.run_consumer(
                jobs, GROUP, handlers,
                json_payloads={topics.JOBS_SUBMITTED.name: "job_submitted"},
                before_commit=self.flush))
            heartbeats = self.bus.consumer(
                HEARTBEAT_GROUP, topics.NODES_HEARTBEATS,
                fetch_max_wait_ms=self.settings.heartbeat_fetch_max_wait_ms,
                fetch_min_bytes=self.settings.heartbeat_fetch_min_bytes)
            consume_heartbeats = asyncio.create_task(self.bus.run_consumer(
                heartbeats, HEARTBEAT_GROUP, {"node_heartbeat": self.on_heartbeat},
                before_commit=self.flush))
            log.info("orchestrator started", grpc=f"{self.settings.grpc_host}:{self.settings.grpc_port}")
            await run_until_stopped(stop, consume_jobs, consume_heartbeats,
                                    asyncio.create_task(self.liveness_loop()))
        finally:
            await server.stop(grace=1)
            await self.bus.stop()


def main() -> None:
    settings = ServiceSettings()
    run_service(lambda stop: OrchestratorService(Bus("orchestrator", settings), settings).run(stop))
