"""gRPC edge of the orchestrator: JobService, ClusterService, and PredictorService dry runs."""
from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, AsyncIterator

import grpc

from opentelemetry.trace import SpanKind

from frenzy import topics, tracing
from frenzy.catalog.gpus import get_gpu
from frenzy.convert import option_to_proto
from frenzy.grpc_ops import enable_health_and_reflection
from frenzy.jobspec import SpecError, resolve_spec
from frenzy.v1 import services_pb2, services_pb2_grpc, types_pb2
from frenzy_orchestrator import lifecycle
from frenzy_orchestrator.logstream import stream_logs
from frenzy_predictor.planner import plan_job

if TYPE_CHECKING:
    from frenzy_orchestrator.service import OrchestratorService


async def _invalid(context: grpc.aio.ServicerContext, message: str) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


class JobApi(services_pb2_grpc.JobServiceServicer):
    def __init__(self, service: "OrchestratorService") -> None:
        self.service = service

    async def SubmitJob(self, request, context):
        try:
            resolve_spec(request.spec)
        except SpecError as err:
            await _invalid(context, f"spec.{err}")
        job_id = request.job_id or f"job-{uuid.uuid4().hex[:10]}"
        # The job's trace starts here, or continues the caller's (traceparent in the metadata).
        with tracing.tracer().start_as_current_span(
                "SubmitJob", context=tracing.context_from_metadata(context.invocation_metadata()),
                kind=SpanKind.SERVER, attributes={"frenzy.job_id": job_id}):
            await self.service.submit(job_id, request.spec)
        return services_pb2.SubmitJobResponse(job_id=job_id)

    async def _get(self, job_id: str, context) -> types_pb2.Job:
        if not job_id:
            await _invalid(context, "job_id: must not be empty")
        rec = self.service.core.jobs.get(job_id)
        if rec is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {job_id!r}")
        return rec.job

    async def GetJob(self, request, context):
        return await self._get(request.job_id, context)

    async def ListJobs(self, request, context):
        wanted = set(request.states)
        jobs = [r.job for r in self.service.core.jobs.values() if not wanted or r.job.state in wanted]
        jobs.sort(key=lambda j: (j.submitted_at.ToNanoseconds(), j.id))
        return services_pb2.ListJobsResponse(jobs=jobs)

    async def CancelJob(self, request, context):
        await self._get(request.job_id, context)
        await self.service.cancel(request.job_id)
        return self.service.core.jobs[request.job_id].job

    async def WatchJob(self, request, context) -> AsyncIterator[types_pb2.Job]:
        job = await self._get(request.job_id, context)
        updates: asyncio.Queue[types_pb2.Job] = asyncio.Queue()
        self.service.watchers.setdefault(request.job_id, []).append(updates)
        try:
            snapshot = types_pb2.Job()
            snapshot.CopyFrom(job)
            yield snapshot
            last_version = snapshot.version
            while snapshot.state not in lifecycle.TERMINAL:
                snapshot = await updates.get()
                if snapshot.version > last_version:
                    last_version = snapshot.version
                    yield snapshot
        finally:
            self.service.watchers[request.job_id].remove(updates)

    async def StreamLogs(self, request, context) -> AsyncIterator[types_pb2.LogChunk]:
        job = await self._get(request.job_id, context)
        if request.HasField("rank") and request.rank < 0:
            await _invalid(context, f"rank: must not be negative, got {request.rank}")
        jobs, bus = self.service.core.jobs, self.service.bus
        topic = bus.topic_name(topics.JOBS_LOGS)
        async for chunk in stream_logs(
                bus.bootstrap, topic, len(await bus.producer.partitions_for(topic)), job.id,
                job.submitted_at.ToMilliseconds(),
                lambda: jobs[request.job_id].job.state in lifecycle.TERMINAL,
                follow=request.follow, rank=request.rank if request.HasField("rank") else None,
                attempt=request.attempt):
            yield chunk


class ClusterApi(services_pb2_grpc.ClusterServiceServicer):
    def __init__(self, service: "OrchestratorService") -> None:
        self.service = service

    async def GetCluster(self, request, context):
        return self.service.core.cluster_summary()

    async def ListNodes(self, request, context):
        nodes = []
        for n in sorted(self.service.core.nodes.values(), key=lambda n: n.node_id):
            node = types_pb2.Node(id=n.node_id, gpu_type=n.gpu_type, gpus_total=n.gpus_total,
                                  gpus_free=len(n.free_gpus), state=n.state, agent_pid=n.agent_pid,
                                  host=n.host, gpus=n.gpus, running_jobs=n.running_jobs)
            node.last_heartbeat.FromNanoseconds(int(n.last_heartbeat_s * 1e9))
            nodes.append(node)
        return services_pb2.ListNodesResponse(nodes=nodes)


class PredictorApi(services_pb2_grpc.PredictorServiceServicer):
    """Dry runs call the predictor's pure core in-process: the same code the service runs."""

    async def Predict(self, request, context):
        try:
            types = [get_gpu(name) for name in request.gpu_types] or None
        except KeyError as err:
            await _invalid(context, f"gpu_types: {err.args[0]}")
        try:
            options, num_params = await asyncio.to_thread(plan_job, request.spec, types)
        except SpecError as err:
            await _invalid(context, f"spec.{err}")
        return services_pb2.PredictResponse(
            options=[option_to_proto(o, i) for i, o in enumerate(options)], num_params=num_params)


async def start_grpc(service: "OrchestratorService", host: str, port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    services_pb2_grpc.add_JobServiceServicer_to_server(JobApi(service), server)
    services_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterApi(service), server)
    services_pb2_grpc.add_PredictorServiceServicer_to_server(PredictorApi(), server)
    await enable_health_and_reflection(
        server, [s.full_name for s in services_pb2.DESCRIPTOR.services_by_name.values()])
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot listen on {host}:{port}")
    await server.start()
    return server
