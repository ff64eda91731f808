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
from frenzy.security import tenancy
from frenzy.security.grpc_auth import TRANSPORT_MAX_BYTES, AuthInterceptor, Authenticator, caller
from frenzy.security.limits import job_id_problem
from frenzy.security.tls import ServerTls
from frenzy.v1 import services_pb2, services_pb2_grpc, types_pb2
from frenzy_orchestrator import lifecycle
from frenzy_orchestrator.core import MAX_SPEC_BYTES
from frenzy_orchestrator.logstream import stream_logs
from frenzy_predictor.planner import plan_job

if TYPE_CHECKING:
    from frenzy_orchestrator.service import OrchestratorService


async def _invalid(context: grpc.aio.ServicerContext, message: str) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


class JobApi(services_pb2_grpc.JobServiceServicer):
    """Every job a caller names or lists is scoped to its tenant (admins see all tenants)."""

    def __init__(self, service: "OrchestratorService", auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    async def SubmitJob(self, request, context):
        who = caller()
        if request.job_id and job_id_problem(request.job_id):
            await _invalid(context, f"job_id: {job_id_problem(request.job_id)}")
        try:
            resolve_spec(request.spec)  # per-field limits first: the error names the field
        except SpecError as err:
            await _invalid(context, f"spec.{err}")
        if request.spec.ByteSize() > MAX_SPEC_BYTES:
            await _invalid(context, f"spec: {request.spec.ByteSize()} bytes, more than {MAX_SPEC_BYTES}")
        policy = self.auth.store.tenant(who.tenant) if self.auth.store else None
        if policy is not None:
            problem = tenancy.entrypoint_problem(list(request.spec.entrypoint), policy)
            if problem:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"spec.entrypoint: {problem}")
            problem = tenancy.quota_problem(who.tenant, policy, request.spec,
                                            (r.job for r in self.service.core.jobs.values()))
            if problem:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, problem)
        job_id = request.job_id or f"job-{uuid.uuid4().hex[:10]}"
        if self.service.core.conflicting_spec(job_id, request.spec, who.tenant):
            # The same message whoever owns it: another tenant's job is not described.
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"job_id: {job_id!r} is taken by a job with another spec or owner")
        # The job's trace starts here, or continues the caller's (traceparent in the metadata).
        with tracing.tracer().start_as_current_span(
                "SubmitJob", context=tracing.context_from_metadata(context.invocation_metadata()),
                kind=SpanKind.SERVER, attributes={"frenzy.job_id": job_id}):
            await self.service.submit(job_id, request.spec, who.tenant)
        return services_pb2.SubmitJobResponse(job_id=job_id)

    async def _get(self, job_id: str, context) -> types_pb2.Job:
        if not job_id:
            await _invalid(context, "job_id: must not be empty")
        if job_id_problem(job_id):
            await _invalid(context, f"job_id: {job_id_problem(job_id)}")
        rec = self.service.core.jobs.get(job_id)
        # Another tenant's job answers exactly as a missing one: nothing about it leaks.
        if rec is None or not tenancy.can_see(caller(), rec.job):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job_id: no job {job_id!r}")
        return rec.job

    async def GetJob(self, request, context):
        return await self._get(request.job_id, context)

    async def ListJobs(self, request, context):
        wanted = set(request.states)
        who = caller()
        jobs = [r.job for r in self.service.core.jobs.values()
                if (not wanted or r.job.state in wanted) and tenancy.can_see(who, r.job)]
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
                bus.bootstrap, bus.producer, topic, len(await bus.producer.partitions_for(topic)), job.id,
                job.submitted_at.ToMilliseconds(),
                lambda: jobs[request.job_id].job.state in lifecycle.TERMINAL,
                follow=request.follow, rank=request.rank if request.HasField("rank") else None,
                attempt=request.attempt, hole_wait_s=bus.settings.offset_hole_wait_s):
            yield chunk


class ClusterApi(services_pb2_grpc.ClusterServiceServicer):
    """Capacity is visible to every tenant; other tenants' job ids and counts are not."""

    def __init__(self, service: "OrchestratorService", auth: Authenticator) -> None:
        self.service = service
        self.auth = auth

    async def GetCluster(self, request, context):
        return tenancy.scoped_summary(caller(), self.service.core.cluster_summary(),
                                      (r.job for r in self.service.core.jobs.values()))

    async def ListNodes(self, request, context):
        nodes = []
        for n in sorted(self.service.core.nodes.values(), key=lambda n: n.node_id):
            node = types_pb2.Node(id=n.node_id, gpu_type=n.gpu_type, gpus_total=n.gpus_total,
                                  gpus_free=len(n.free_gpus), state=n.state, agent_pid=n.agent_pid,
                                  agent_restarts=n.agent_restarts,
                                  host=n.host, gpus=n.gpus, running_jobs=n.running_jobs)
            node.last_heartbeat.FromNanoseconds(int(n.last_heartbeat_s * 1e9))
            nodes.append(node)
        owner = {job_id: r.job.tenant for job_id, r in self.service.core.jobs.items()}
        return services_pb2.ListNodesResponse(
            nodes=tenancy.scoped_nodes(caller(), nodes, owner))


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


async def start_grpc(service: "OrchestratorService", host: str, port: int,
                     auth: Authenticator | None = None, tls: ServerTls | None = None) -> grpc.aio.Server:
    auth = auth or Authenticator(None)
    # No SO_REUSEPORT: a second orchestrator on a taken port must fail, not share it (clients
    # would reach either one).
    server = grpc.aio.server(
        interceptors=[AuthInterceptor(auth)],
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", TRANSPORT_MAX_BYTES)])
    services_pb2_grpc.add_JobServiceServicer_to_server(JobApi(service, auth), server)
    services_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterApi(service, auth), server)
    services_pb2_grpc.add_PredictorServiceServicer_to_server(PredictorApi(), server)
    await enable_health_and_reflection(
        server, [s.full_name for s in services_pb2.DESCRIPTOR.services_by_name.values()])
    if tls is not None:
        credentials = grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)])
        bound = server.add_secure_port(f"{host}:{port}", credentials)
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot listen on {host}:{port}")
    await server.start()
    return server
