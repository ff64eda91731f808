"""The orchestrator's pure core: the authoritative GPU state and every job's lifecycle.

No I/O here. Each handler takes an event and the time, updates state, and returns the events
to publish (`Outgoing`). The Kafka shell publishes them; tests call the handlers directly.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from google.protobuf.message import Message

from frenzy import topics
from frenzy.jobspec import SpecError, resolve_spec
from frenzy.outcomes import OOM_REASON, RENDEZVOUS_REASON
from frenzy.v1 import events_pb2, services_pb2, types_pb2
from frenzy.v1.types_pb2 import (CANCELLED, FAILED, LAUNCHING, PLACED, PLANNED, QUEUED, RUNNING,
                                 SUBMITTED, SUCCEEDED)
from frenzy_orchestrator import lifecycle


@dataclass(frozen=True)
class Outgoing:
    topic: topics.Topic
    key: str
    payload: Message | None  # None: a tombstone on a compacted topic


@dataclass
class NodeRecord:
    node_id: str
    gpu_type: str
    gpus_total: int
    host: str = "127.0.0.1"
    agent_pid: int = 0
    state: int = types_pb2.NODE_READY
    last_heartbeat_s: float = 0.0
    gpus: list[types_pb2.GpuStatus] = field(default_factory=list)
    allocations: dict[int, str] = field(default_factory=dict)  # GPU index -> job id
    running_jobs: list[str] = field(default_factory=list)
    version: int = 0
    heard: bool = True  # False for a node known only from recovered jobs, until it heartbeats

    @property
    def free_gpus(self) -> list[int]:
        if self.state != types_pb2.NODE_READY:
            return []
        healthy = {g.index for g in self.gpus if g.health != types_pb2.UNHEALTHY} if self.gpus \
            else set(range(self.gpus_total))
        return sorted(healthy - set(self.allocations))


@dataclass
class JobRecord:
    job: types_pb2.Job
    node_outcomes: dict[str, int] = field(default_factory=dict)  # node -> agent-reported state
    oom_replans: int = 0
    history: list[tuple[int, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.job.id


MASTER_PORT_BASE, MASTER_PORT_SPAN = 29500, 3000  # torch's default port and up: 29500-32499


def master_port(job_id: str, attempt: int) -> int:
    """A port for rank 0's rendezvous store, new for every attempt. The range stays below Linux's
    ephemeral ports (32768 and up), so the kernel never hands it to an outgoing connection; if it
    is taken anyway, the ranks exit RENDEZVOUS and the next attempt draws another port."""
    digest = hashlib.sha1(f"{job_id}:{attempt}".encode()).digest()
    return MASTER_PORT_BASE + int.from_bytes(digest[:4], "big") % MASTER_PORT_SPAN


class OrchestratorCore:
    def __init__(self, node_timeout_s: float = 10.0, max_retries: int = 3,
                 max_oom_replans: int = 1, epoch: int = 0) -> None:
        self.node_timeout_s = node_timeout_s
        self.max_retries = max_retries
        self.max_oom_replans = max_oom_replans
        self.epoch = epoch  # orchestrator incarnation; keeps node versions growing over restarts
        self.nodes: dict[str, NodeRecord] = {}
        self.jobs: dict[str, JobRecord] = {}
        # Topics are not ordered relative to each other: a JobPlanned can arrive before the
        # JobSubmitted of a job produced straight onto Kafka. It waits here for its job.
        self.early_plans: dict[str, events_pb2.JobPlanned] = {}
        # (gpu type, (predicted - measured) / measured) of each job that reported its peak.
        self.memory_errors: list[tuple[str, float]] = []
        # What changed since the last drain_state_records(): job ids and early-plan job ids.
        self._dirty_jobs: set[str] = set()
        self._dirty_early: set[str] = set()

    # ----- durable state ----------------------------------------------------------------
    def drain_state_records(self) -> list[Outgoing]:
        """State records for everything changed since the last call.

        The shell publishes these after the handler's other events: if it dies in between, the
        input event is redelivered and handled again from the older state, rather than the new
        state being saved with its commands never sent.
        """
        out = [Outgoing(topics.ORCHESTRATOR_STATE, f"job/{job_id}", self.record_state(job_id))
               for job_id in sorted(self._dirty_jobs)]
        out += [Outgoing(topics.ORCHESTRATOR_STATE, f"early/{job_id}", self.early_plans.get(job_id))
                for job_id in sorted(self._dirty_early)]
        self._dirty_jobs.clear()
        self._dirty_early.clear()
        return out

    def record_state(self, job_id: str) -> events_pb2.JobRecordState:
        rec = self.jobs[job_id]
        return events_pb2.JobRecordState(job=rec.job, node_outcomes=rec.node_outcomes,
                                         oom_replans=rec.oom_replans)

    def restore(self, records: list[events_pb2.JobRecordState],
                early_plans: list[events_pb2.JobPlanned], now_s: float) -> None:
        """Rebuild jobs and allocations from saved records after a restart.

        Nodes come back from their heartbeats. Until a node heartbeats it exists only to hold its
        jobs' GPUs; if it stays silent past the timeout, liveness re-queues those jobs as usual.
        """
        for saved in records:
            job = types_pb2.Job()
            job.CopyFrom(saved.job)
            rec = JobRecord(job, dict(saved.node_outcomes), saved.oom_replans,
                            history=[(job.state, "restored")])
            self.jobs[job.id] = rec
            if job.state == SUCCEEDED:
                self._record_memory_error(job)
            if job.state not in (PLACED, LAUNCHING, RUNNING):
                continue
            for a in job.assignments:
                node = self.nodes.get(a.node_id)
                if node is None:
                    node = NodeRecord(a.node_id, job.option.gpu_type, 0, last_heartbeat_s=now_s,
                                      heard=False)
                    self.nodes[a.node_id] = node
                node.gpus_total = max(node.gpus_total, max(a.gpu_indices, default=-1) + 1)
                for gpu in a.gpu_indices:
                    node.allocations[gpu] = job.id
        for planned in early_plans:
            if planned.job_id not in self.jobs:
                self.early_plans[planned.job_id] = planned

    # ----- jobs -------------------------------------------------------------------------
    def _transition(self, rec: JobRecord, target: int, reason: str, now_s: float) -> list[Outgoing]:
        lifecycle.check(rec.job.state, target)
        job = rec.job
        job.state, job.reason = target, reason
        job.version += 1
        stamp = {PLACED: job.placed_at, RUNNING: job.started_at}.get(target)
        if stamp is not None:
            stamp.FromNanoseconds(int(now_s * 1e9))
        if target in lifecycle.TERMINAL:
            job.finished_at.FromNanoseconds(int(now_s * 1e9))
        rec.history.append((target, reason))
        self._dirty_jobs.add(job.id)
        status = events_pb2.JobStatusChanged(
            job_id=job.id, state=target, reason=reason, source=events_pb2.ORCHESTRATOR,
            attempt=job.attempt, exit_code=job.exit_code)
        status.progress.CopyFrom(job.progress)
        status.job.CopyFrom(job)
        return [Outgoing(topics.JOBS_STATUS, job.id, status)]

    def submit(self, job_id: str, spec: types_pb2.JobSpec, now_s: float,
               tenant: str = "") -> list[Outgoing]:
        """Register a job from JobSubmitted (idempotent: a known job id is left alone)."""
        if job_id in self.jobs:
            return []
        job = types_pb2.Job(id=job_id, spec=spec, state=SUBMITTED, reason="submitted", version=1,
                            tenant=tenant)
        job.submitted_at.FromNanoseconds(int(now_s * 1e9))
        rec = JobRecord(job, history=[(SUBMITTED, "submitted")])
        self.jobs[job_id] = rec
        self._dirty_jobs.add(job_id)
        try:
            resolve_spec(spec)
        except SpecError as err:
            return self._transition(rec, FAILED, f"invalid spec: {err}", now_s)
        status = events_pb2.JobStatusChanged(job_id=job_id, state=SUBMITTED, reason="submitted",
                                             source=events_pb2.ORCHESTRATOR, job=job)
        out = [Outgoing(topics.JOBS_STATUS, job_id, status)]
        early = self.early_plans.pop(job_id, None)
        if early is not None:
            self._dirty_early.add(job_id)
        return out + (self.on_planned(early, now_s) if early is not None else [])

    def on_planned(self, planned: events_pb2.JobPlanned, now_s: float) -> list[Outgoing]:
        rec = self.jobs.get(planned.job_id)
        if rec is None:
            self.early_plans[planned.job_id] = planned
            self._dirty_early.add(planned.job_id)
            return []
        if rec.job.state != SUBMITTED or planned.attempt != rec.job.attempt:
            return []
        if not planned.options:
            return self._transition(rec, FAILED, planned.reason or "unschedulable", now_s)
        out = self._transition(rec, PLANNED, f"{len(planned.options)} options", now_s)
        return out + self._transition(rec, QUEUED, "waiting for GPUs", now_s)

    def on_placed(self, placed: events_pb2.JobPlaced, now_s: float) -> list[Outgoing]:
        """Validate a placement against the free GPUs (optimistic concurrency), then launch."""
        rec = self.jobs.get(placed.job_id)
        if rec is None or rec.job.state != QUEUED or placed.attempt != rec.job.attempt:
            return []  # stale or duplicate decision; the job is not waiting
        problem = self._placement_problem(placed)
        if problem:
            out = self._transition(rec, QUEUED, f"placement rejected: {problem}", now_s)
            return out + [self._availability(self.nodes[a.node_id], "placement rejected")
                          for a in placed.assignments if a.node_id in self.nodes]
        job = rec.job
        job.option.CopyFrom(placed.option)
        del job.assignments[:]
        job.assignments.extend(placed.assignments)
        rec.node_outcomes = {a.node_id: LAUNCHING for a in placed.assignments}
        for a in placed.assignments:
            for gpu in a.gpu_indices:
                self.nodes[a.node_id].allocations[gpu] = job.id
        out = self._transition(rec, PLACED, f"{len(placed.assignments)} node(s)", now_s)
        out += self._launch_commands(rec)
        out += self._transition(rec, LAUNCHING, "launch sent", now_s)
        out += [self._availability(self.nodes[a.node_id], f"job {job.id} placed")
                for a in placed.assignments]
        return out

    def _placement_problem(self, placed: events_pb2.JobPlaced) -> str:
        if not placed.assignments:
            return "no GPUs assigned"
        count = 0
        for a in placed.assignments:
            node = self.nodes.get(a.node_id)
            if node is None:
                return f"unknown node {a.node_id}"
            if node.state != types_pb2.NODE_READY:
                return f"node {a.node_id} is lost"
            if node.gpu_type != placed.option.gpu_type:
                return f"node {a.node_id} has {node.gpu_type}, plan wants {placed.option.gpu_type}"
            busy = sorted(set(a.gpu_indices) - set(node.free_gpus))
            if busy or len(set(a.gpu_indices)) != len(a.gpu_indices):
                return f"GPUs {busy or list(a.gpu_indices)} on {a.node_id} are not free"
            count += len(a.gpu_indices)
        if count != placed.option.num_gpus:
            return f"{count} GPUs assigned, plan needs {placed.option.num_gpus}"
        return ""

    def _launch_commands(self, rec: JobRecord) -> list[Outgoing]:
        job = rec.job
        master = self.nodes[job.assignments[0].node_id]
        out, offset = [], 0
        for rank, a in enumerate(job.assignments):
            launch = events_pb2.LaunchJob(
                job_id=job.id, node_id=a.node_id, attempt=job.attempt, gpu_indices=a.gpu_indices,
                node_rank=rank, num_nodes=len(job.assignments), world_size=job.option.num_gpus,
                rank_offset=offset, master_addr=master.host,
                master_port=master_port(job.id, job.attempt), option=job.option, spec=job.spec)
            offset += len(a.gpu_indices)
            out.append(Outgoing(topics.AGENT_COMMANDS, a.node_id, launch))
        return out

    def _stop_commands(self, rec: JobRecord, reason: str, skip: str = "") -> list[Outgoing]:
        return [Outgoing(topics.AGENT_COMMANDS, a.node_id, events_pb2.StopJob(
                    job_id=rec.id, node_id=a.node_id, reason=reason, attempt=rec.job.attempt))
                for a in rec.job.assignments if a.node_id != skip and a.node_id in self.nodes
                and self.nodes[a.node_id].state == types_pb2.NODE_READY]

    def _release(self, rec: JobRecord, cause: str) -> list[Outgoing]:
        out = []
        for a in rec.job.assignments:
            node = self.nodes.get(a.node_id)
            if node is None:
                continue
            for gpu in a.gpu_indices:
                if node.allocations.get(gpu) == rec.id:
                    del node.allocations[gpu]
            out.append(self._availability(node, cause))
        return out

    def on_agent_status(self, status: events_pb2.JobStatusChanged, now_s: float) -> list[Outgoing]:
        rec = self.jobs.get(status.job_id)
        if rec is None or rec.job.state in lifecycle.TERMINAL or status.attempt != rec.job.attempt:
            return []
        if status.node_id not in rec.node_outcomes or rec.job.state not in (LAUNCHING, RUNNING):
            return []
        job = rec.job
        self._dirty_jobs.add(job.id)
        if status.HasField("progress") and status.progress.step >= job.progress.step:
            job.progress.CopyFrom(status.progress)
        if status.state == RUNNING:
            rec.node_outcomes[status.node_id] = RUNNING
            if job.state == LAUNCHING:
                return self._transition(rec, RUNNING, "processes started", now_s)
            return self._progress_update(rec)
        if status.state == SUCCEEDED:
            rec.node_outcomes[status.node_id] = SUCCEEDED
            if all(s == SUCCEEDED for s in rec.node_outcomes.values()):
                self._record_memory_error(job)
                out = self._release(rec, f"job {job.id} finished")
                return self._transition(rec, SUCCEEDED, "all processes exited 0", now_s) + out
            return []
        if status.state == FAILED:
            job.exit_code = status.exit_code
            rec.node_outcomes[status.node_id] = FAILED
            if status.reason.startswith(OOM_REASON):
                self._record_memory_error(job)
            out = self._stop_commands(rec, "another node failed", skip=status.node_id)
            out += self._release(rec, f"job {job.id} failed")
            if status.reason.startswith(OOM_REASON) and rec.oom_replans < self.max_oom_replans:
                return out + self._replan_after_oom(rec, status, now_s)
            if status.reason.startswith(RENDEZVOUS_REASON):
                return out + self._requeue(rec, f"{status.reason} (node {status.node_id})", now_s)
            return self._transition(rec, FAILED, status.reason or f"exit code {status.exit_code}", now_s) + out
        return []

    def _record_memory_error(self, job: types_pb2.Job) -> None:
        """How far MARP's prediction for the plan was from the peak the job measured."""
        measured, predicted = job.progress.peak_memory_bytes, job.option.peak_bytes_per_gpu
        if measured > 0 and predicted > 0:
            self.memory_errors.append((job.option.gpu_type, (predicted - measured) / measured))

    def _progress_update(self, rec: JobRecord) -> list[Outgoing]:
        rec.job.version += 1
        status = events_pb2.JobStatusChanged(
            job_id=rec.id, state=rec.job.state, reason=rec.job.reason,
            source=events_pb2.ORCHESTRATOR, attempt=rec.job.attempt, progress=rec.job.progress,
            job=rec.job)
        return [Outgoing(topics.JOBS_STATUS, rec.id, status)]

    def _replan_after_oom(self, rec: JobRecord, status: events_pb2.JobStatusChanged,
                          now_s: float) -> list[Outgoing]:
        """Out of memory: ask MARP again, requiring more memory per GPU than the failed plan had."""
        rec.oom_replans += 1
        job = rec.job
        measured = status.progress.peak_memory_bytes
        floor = int(max(measured, job.option.peak_bytes_per_gpu) * 1.25)
        job.attempt += 1
        job.ClearField("progress")  # the new attempt starts from step 0
        reason = (f"{OOM_REASON} on {job.option.gpu_type} (predicted "
                  f"{job.option.peak_bytes_per_gpu}, measured {measured} bytes); re-planning")
        out = self._transition(rec, SUBMITTED, reason, now_s)
        resubmit = events_pb2.JobSubmitted(job_id=job.id, spec=job.spec, attempt=job.attempt,
                                           tenant=job.tenant,
                                           min_memory_bytes=floor)
        resubmit.submitted_at.CopyFrom(job.submitted_at)
        return out + [Outgoing(topics.JOBS_SUBMITTED, job.id, resubmit)]

    def cancel(self, job_id: str, now_s: float, reason: str = "cancelled by user") -> list[Outgoing]:
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.state in lifecycle.TERMINAL:
            return []
        out = self._stop_commands(rec, reason) + self._release(rec, f"job {job_id} cancelled")
        return self._transition(rec, CANCELLED, reason, now_s) + out

    # ----- nodes ------------------------------------------------------------------------
    def _availability(self, node: NodeRecord, cause: str) -> Outgoing:
        node.version += 1
        return Outgoing(topics.CLUSTER_EVENTS, node.node_id, events_pb2.GpuAvailabilityChanged(
            node_id=node.node_id, gpu_type=node.gpu_type, gpus_total=node.gpus_total,
            free_gpu_indices=node.free_gpus, node_state=node.state,
            version=(self.epoch << 32) | node.version,
            cause=cause, allocated_jobs=sorted(set(node.allocations.values()))))

    def on_heartbeat(self, hb: events_pb2.NodeHeartbeat, now_s: float) -> list[Outgoing]:
        node = self.nodes.get(hb.node_id)
        gpu_type = hb.gpus[0].gpu_type if hb.gpus else ""
        out: list[Outgoing] = []
        if node is None:
            node = NodeRecord(hb.node_id, gpu_type, len(hb.gpus))
            self.nodes[hb.node_id] = node
            cause = "node joined"
        elif node.state != types_pb2.NODE_READY:
            node.state = types_pb2.NODE_READY
            cause = "node recovered"
        elif not node.heard:
            node.heard = True
            cause = "node reported after orchestrator restart"
        else:
            cause = ""
        healthy_before = node.free_gpus
        node.host, node.agent_pid, node.last_heartbeat_s = hb.host or node.host, hb.agent_pid, now_s
        node.gpus = list(hb.gpus)
        node.gpu_type, node.gpus_total = gpu_type or node.gpu_type, len(hb.gpus) or node.gpus_total
        node.running_jobs = list(hb.running_jobs)
        if cause or node.free_gpus != healthy_before:
            out.append(self._availability(node, cause or "GPU health changed"))
        return out

    def check_liveness(self, now_s: float) -> list[Outgoing]:
        """Mark silent nodes lost and re-queue their jobs (or fail them after max retries)."""
        out: list[Outgoing] = []
        for node in self.nodes.values():
            if node.state == types_pb2.NODE_READY and now_s - node.last_heartbeat_s > self.node_timeout_s:
                node.state = types_pb2.NODE_LOST
                for job_id in sorted(set(node.allocations.values())):
                    out += self._requeue_lost(self.jobs[job_id], node.node_id, now_s)
                node.allocations.clear()
                out.append(self._availability(node, "node lost"))
        return out

    def _requeue_lost(self, rec: JobRecord, node_id: str, now_s: float) -> list[Outgoing]:
        out = self._stop_commands(rec, f"node {node_id} lost", skip=node_id)
        out += self._release(rec, f"job {rec.id} re-queued")
        return self._requeue(rec, f"node {node_id} lost", now_s) + out

    def _requeue(self, rec: JobRecord, cause: str, now_s: float) -> list[Outgoing]:
        """Not the job's fault (a lost node, a process group that did not form): run it again as
        a new attempt, which starts from step 0 on a new master port, or fail after max retries."""
        job = rec.job
        if job.attempt >= self.max_retries:
            return self._transition(rec, FAILED, f"{cause}; retries exhausted", now_s)
        job.attempt += 1
        job.ClearField("option")
        job.ClearField("progress")
        del job.assignments[:]
        rec.node_outcomes = {}
        return self._transition(rec, QUEUED, f"{cause}; retry {job.attempt}", now_s)

    # ----- views ------------------------------------------------------------------------
    def cluster_summary(self) -> services_pb2.ClusterSummary:
        """Per GPU type: total, free and allocated GPUs, running and queued jobs."""
        summary: dict[str, services_pb2.GpuTypeSummary] = {}
        for node in self.nodes.values():
            s = summary.setdefault(node.gpu_type, services_pb2.GpuTypeSummary(gpu_type=node.gpu_type))
            s.nodes += 1
            s.total += node.gpus_total
            s.free += len(node.free_gpus)
            s.allocated += len(node.allocations)
        for rec in self.jobs.values():
            gpu_type = rec.job.option.gpu_type
            if rec.job.state in (PLACED, LAUNCHING, RUNNING) and gpu_type in summary:
                summary[gpu_type].running_jobs += 1
            elif rec.job.state == QUEUED:
                for s in summary.values():  # a queued job waits on every type it could use
                    s.queued_jobs += 1
        ready = sum(1 for n in self.nodes.values() if n.state == types_pb2.NODE_READY)
        errors = [error for _, error in self.memory_errors]
        stats = services_pb2.MemoryPredictionStats(
            jobs=len(errors),
            mean_abs_error=sum(abs(e) for e in errors) / len(errors) if errors else 0.0,
            worst_under_prediction=min([0.0, *errors]))
        return services_pb2.ClusterSummary(
            gpu_types=sorted(summary.values(), key=lambda s: s.gpu_type), nodes_ready=ready,
            nodes_lost=len(self.nodes) - ready, memory_prediction=stats)

    def queued_count(self) -> int:
        return sum(1 for r in self.jobs.values() if r.job.state in (SUBMITTED, PLANNED, QUEUED))
