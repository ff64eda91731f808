"""The orchestrator's pure core: the authoritative GPU state and every job's lifecycle.

No I/O here. Each handler takes an event and the time, updates state, and returns the events
to publish (`Outgoing`). The Kafka shell publishes them; tests call the handlers directly.

Nothing stuck, nothing twice (docs/architecture.md, "Recovery guarantees"):
- every non-terminal state has a way out: SUBMITTED ends after `plan_timeout_s` without a plan,
  QUEUED ends when no option fits the cluster's GPUs (unschedulable), LAUNCHING is retried after
  `launch_timeout_s`, RUNNING is retried when its node is lost or stops reporting it;
- each heartbeat is reconciled against these records: a process running for an attempt that is
  not current is stopped, and until it is gone its GPUs are fenced (never counted free). That is
  what keeps a node that returns after being declared lost from running two attempts at once.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from google.protobuf.message import Message

from frenzy import topics
from frenzy.jobspec import SpecError, resolve_spec
from frenzy.outcomes import LOST_REASON, OOM_REASON, PREEMPTED_REASON, RENDEZVOUS_REASON
from frenzy.placement_check import NodeFacts, placement_problem
from frenzy.ports import RENDEZVOUS_PORTS
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
    agent_restarts: int = 0
    state: int = types_pb2.NODE_READY
    last_heartbeat_s: float = 0.0
    gpus: list[types_pb2.GpuStatus] = field(default_factory=list)
    allocations: dict[int, str] = field(default_factory=dict)  # GPU index -> job id
    running_jobs: list[str] = field(default_factory=list)
    version: int = 0
    heard: bool = True  # False for a node known only from recovered jobs, until it heartbeats
    # GPUs the agent says a job uses that these records do not allocate to it there: a stale
    # attempt still running. Never free until a heartbeat shows them released.
    fenced_gpus: set[int] = field(default_factory=set)
    # "job:attempt" the agent's last heartbeat runs or has seen end (its status may lag).
    known_attempts: set[str] = field(default_factory=set)
    # "job:attempt" whose end this node's agent has reported (its final status): a heartbeat
    # that still lists one as running was sent before that report (the agent drops an attempt
    # from its running list before reporting its end, and never runs it again), so its GPUs
    # are not fenced and no stop is sent for it. Kept while heartbeats still list it.
    reported_ended: set[str] = field(default_factory=set)
    stops_sent_s: dict[str, float] = field(default_factory=dict)  # "job:attempt" -> last StopJob

    @property
    def free_gpus(self) -> list[int]:
        if self.state != types_pb2.NODE_READY:
            return []
        healthy = {g.index for g in self.gpus if g.health != types_pb2.UNHEALTHY} if self.gpus \
            else set(range(self.gpus_total))
        return sorted(healthy - set(self.allocations) - self.fenced_gpus)


@dataclass
class CleanupRetry:
    """When a pending DeleteCheckpoints goes to its node again, and the wait after that."""
    next_send_s: float
    delay_s: float = 0.0


@dataclass
class JobRecord:
    job: types_pb2.Job
    node_outcomes: dict[str, int] = field(default_factory=dict)  # node -> agent-reported state
    oom_replans: int = 0
    history: list[tuple[int, str]] = field(default_factory=list)
    since_s: float = 0.0  # when the job entered its current state (or was restored)
    needs: list[tuple[str, int]] = field(default_factory=list)  # (GPU type, GPUs) per plan option
    missing_since_s: dict[str, float] = field(default_factory=dict)  # node -> first heartbeat without it
    # A ReshapeJob being carried out: its checkpoint-now stops are out, the agents' PREEMPTED
    # reports are awaited. Saved with the record, so a restarted orchestrator finishes it.
    pending_reshape: events_pb2.ReshapeJob | None = None
    free_attempts: int = 0  # attempts that were not failures; they do not count as retries
    # Nodes that ran an attempt: where the checkpoints are removed when the job ends.
    checkpoint_nodes: list[str] = field(default_factory=list)
    # The job ended for good: nodes whose agent has not acknowledged DeleteCheckpoints yet, each
    # with its re-send backoff. The node ids are saved with the record; the backoff is not.
    cleanup: dict[str, CleanupRetry] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.job.id


MAX_SPEC_BYTES = 64 * 1024  # a job spec; status records carry it, and Kafka's default limit is 1 MB
STOP_RESEND_S = 10.0  # how often a stale attempt seen in heartbeats is told to stop again
# An unacknowledged DeleteCheckpoints to a node that is up goes again after this, then after
# twice as long each time up to the cap (a node that comes back gets it at once).
CLEANUP_RETRY_FIRST_S, CLEANUP_RETRY_MAX_S = 10.0, 600.0


def master_port(job_id: str, attempt: int) -> int:
    """A port for rank 0's rendezvous store, new for every attempt. The range stays below Linux's
    ephemeral ports (32768 and up), so the kernel never hands it to an outgoing connection; if it
    is taken anyway, the ranks exit RENDEZVOUS and the next attempt draws another port."""
    digest = hashlib.sha1(f"{job_id}:{attempt}".encode()).digest()
    return RENDEZVOUS_PORTS[int.from_bytes(digest[:4], "big") % len(RENDEZVOUS_PORTS)]


class OrchestratorCore:
    def __init__(self, node_timeout_s: float = 10.0, max_retries: int = 3,
                 max_oom_replans: int = 1, epoch: int = 0, launch_timeout_s: float = 60.0,
                 plan_timeout_s: float = 120.0, cleanup_forget_s: float = 7 * 86400.0) -> None:
        self.node_timeout_s = node_timeout_s
        # A pending checkpoint delete is dropped once the job ended this long ago while its
        # node is not up: the node counts as removed for good (there is no removal command).
        self.cleanup_forget_s = cleanup_forget_s
        self.launch_timeout_s = launch_timeout_s
        self.plan_timeout_s = plan_timeout_s
        self.first_tick_s: float | None = None  # nodes have had a timeout to join after this
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
        # The scheduler's placements decided ahead for a running job's GPUs (HeldPlacements),
        # by that job's id: carried out on its successful end (`_release`). Saved with that
        # job's record: an end report redelivered after a restart (its launches published, the
        # state not yet saved) launches the same placements again, which the agents dedupe,
        # never others on other GPUs.
        self.held: dict[str, events_pb2.HeldPlacements] = {}
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
        state = events_pb2.JobRecordState(job=rec.job, node_outcomes=rec.node_outcomes,
                                          oom_replans=rec.oom_replans, free_attempts=rec.free_attempts,
                                          checkpoint_nodes=rec.checkpoint_nodes,
                                          cleanup_nodes=sorted(rec.cleanup))
        if rec.pending_reshape is not None:
            state.pending_reshape.CopyFrom(rec.pending_reshape)
        if job_id in self.held:
            state.held.CopyFrom(self.held[job_id])
        return state

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
                            history=[(job.state, "restored")], since_s=now_s,
                            free_attempts=saved.free_attempts,
                            checkpoint_nodes=list(saved.checkpoint_nodes),
                            # sent again when each node heartbeats (rejoin), else with backoff
                            cleanup={n: CleanupRetry(now_s + CLEANUP_RETRY_FIRST_S,
                                                     CLEANUP_RETRY_FIRST_S)
                                     for n in saved.cleanup_nodes},
                            pending_reshape=events_pb2.ReshapeJob()
                            if saved.HasField("pending_reshape") else None)
            if rec.pending_reshape is not None:
                rec.pending_reshape.CopyFrom(saved.pending_reshape)
            if saved.HasField("held") and job.state in (LAUNCHING, RUNNING):
                self.held[job.id] = events_pb2.HeldPlacements()
                self.held[job.id].CopyFrom(saved.held)
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
        out: list[Outgoing] = []
        if target in lifecycle.TERMINAL:
            job.finished_at.FromNanoseconds(int(now_s * 1e9))
            self._end_reshape(rec)  # e.g. it finished its last step before saving
            out = self._delete_checkpoints(rec, now_s)
        rec.history.append((target, reason))
        rec.since_s = now_s
        rec.missing_since_s.clear()
        self._dirty_jobs.add(job.id)
        status = events_pb2.JobStatusChanged(
            job_id=job.id, state=target, reason=reason, source=events_pb2.ORCHESTRATOR,
            attempt=job.attempt, exit_code=job.exit_code)
        status.progress.CopyFrom(job.progress)
        status.job.CopyFrom(job)
        return [Outgoing(topics.JOBS_STATUS, job.id, status), *out]

    def _delete_checkpoints(self, rec: JobRecord, now_s: float) -> list[Outgoing]:
        """The job has ended for good: no attempt will resume from its checkpoints, so every node
        that ran one removes them, unless the spec keeps them. Each node's delete stays pending
        (saved with the job's record) until its agent acknowledges it (`on_checkpoints_deleted`):
        a command to an agent that is down expires after the command TTL, so it is sent again
        when the node is seen alive (`_resend_cleanup`) and with backoff (`retry_cleanup`)."""
        if rec.job.spec.training.keep_checkpoints:
            return []
        rec.cleanup = {n: CleanupRetry(now_s) for n in rec.checkpoint_nodes}
        return [out for n in rec.checkpoint_nodes for out in self._send_cleanup(rec, n, now_s)]

    def _send_cleanup(self, rec: JobRecord, node_id: str, now_s: float) -> list[Outgoing]:
        """One DeleteCheckpoints to one node, and when to send it again if no ack comes.

        Held back while a live job's spec names the same directory: its checkpoints are in
        there (that job's own end removes them all)."""
        retry = rec.cleanup[node_id]
        retry.delay_s = min(max(CLEANUP_RETRY_FIRST_S, 2 * retry.delay_s), CLEANUP_RETRY_MAX_S)
        retry.next_send_s = now_s + retry.delay_s
        uri = rec.job.spec.training.checkpoint_uri
        if uri and any(other.job.spec.training.checkpoint_uri == uri for other in self.jobs.values()
                       if other.job.state not in lifecycle.TERMINAL):
            return []
        return [Outgoing(topics.AGENT_COMMANDS, node_id, events_pb2.DeleteCheckpoints(
            job_id=rec.id, node_id=node_id, reason=rec.job.reason[:200], checkpoint_uri=uri))]

    def _resend_cleanup(self, node_id: str, now_s: float) -> list[Outgoing]:
        """The node is seen alive again (it joined, recovered, reported after an orchestrator
        restart, or its agent restarted): its pending deletes go now, freshly signed."""
        out: list[Outgoing] = []
        for rec in self.jobs.values():
            if node_id in rec.cleanup:
                rec.cleanup[node_id].delay_s = 0.0  # the backoff starts over
                out += self._send_cleanup(rec, node_id, now_s)
        return out

    def retry_cleanup(self, now_s: float) -> list[Outgoing]:
        """Pending deletes to nodes that are up go again when their backoff is due (a command
        lost or expired while the node never looked down). One whose job ended more than
        `cleanup_forget_s` ago, to a node that is not up, is dropped: the node is gone for good."""
        out: list[Outgoing] = []
        for rec in self.jobs.values():
            for node_id, retry in list(rec.cleanup.items()):
                node = self.nodes.get(node_id)
                up = node is not None and node.heard and node.state == types_pb2.NODE_READY
                ended_s = rec.job.finished_at.ToNanoseconds() / 1e9
                if not up and now_s - ended_s > self.cleanup_forget_s:
                    del rec.cleanup[node_id]
                    self._dirty_jobs.add(rec.id)
                elif up and now_s >= retry.next_send_s:
                    out += self._send_cleanup(rec, node_id, now_s)
        return out

    def on_checkpoints_deleted(self, ack: events_pb2.CheckpointsDeleted, now_s: float) -> list[Outgoing]:
        """The node's agent removed the job's checkpoints (or found none): nothing is pending
        there any more. Idempotent; an ack for another directory than the job's is ignored."""
        rec = self.jobs.get(ack.job_id)
        if rec is None or ack.node_id not in rec.cleanup \
                or ack.checkpoint_uri != rec.job.spec.training.checkpoint_uri:
            return []
        del rec.cleanup[ack.node_id]
        self._dirty_jobs.add(rec.id)
        return []

    def conflicting_spec(self, job_id: str, spec: types_pb2.JobSpec, tenant: str = "") -> bool:
        """A known job id submitted again with another spec or by another tenant (the same
        spec from the same tenant is a retry)."""
        rec = self.jobs.get(job_id)
        return rec is not None and (rec.job.spec != spec or rec.job.tenant != tenant)

    def submit(self, job_id: str, spec: types_pb2.JobSpec, now_s: float,
               tenant: str = "") -> list[Outgoing]:
        """Register a job from JobSubmitted (idempotent: a known job id is left alone, whatever
        spec comes with it; the gRPC edge refuses a different one with ALREADY_EXISTS)."""
        if job_id in self.jobs:
            return []
        job = types_pb2.Job(id=job_id, spec=spec, state=SUBMITTED, reason="submitted", version=1,
                            tenant=tenant)
        job.submitted_at.FromNanoseconds(int(now_s * 1e9))
        rec = JobRecord(job, history=[(SUBMITTED, "submitted")], since_s=now_s)
        self.jobs[job_id] = rec
        self._dirty_jobs.add(job_id)
        try:
            if spec.ByteSize() > MAX_SPEC_BYTES:
                raise SpecError("spec", f"{spec.ByteSize()} bytes, more than {MAX_SPEC_BYTES}")
            resolve_spec(spec)
        except SpecError as err:
            job.ClearField("spec")  # an oversized spec must not ride on every status record
            job.spec.name = spec.name[:200]
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
        rec.needs = [(o.gpu_type, o.num_gpus) for o in planned.options]
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
        out = self._place(rec, placed, f"{len(placed.assignments)} node(s)", now_s)
        return out + [self._availability(self.nodes[a.node_id], f"job {rec.id} placed")
                      for a in placed.assignments]

    def _place(self, rec: JobRecord, placed: events_pb2.JobPlaced, reason: str,
               now_s: float) -> list[Outgoing]:
        """Allocate a validated placement's GPUs and launch (the caller announces availability)."""
        job = rec.job
        job.option.CopyFrom(placed.option)
        if placed.HasField("decision"):  # why this option (or this reshape): `frenzy explain`
            job.decision.CopyFrom(placed.decision)
        del job.assignments[:]
        job.assignments.extend(placed.assignments)
        rec.node_outcomes = {a.node_id: LAUNCHING for a in placed.assignments}
        rec.checkpoint_nodes += [a.node_id for a in placed.assignments
                                 if a.node_id not in rec.checkpoint_nodes]
        # This attempt resumes from the job's last committed checkpoint (0: a fresh start).
        job.resumed_from_step = job.checkpoint_step if job.HasField("checkpoint_step") else 0
        for a in placed.assignments:
            for gpu in a.gpu_indices:
                self.nodes[a.node_id].allocations[gpu] = job.id
        out = self._transition(rec, PLACED, reason, now_s)
        out += self._launch_commands(rec)
        out += self._transition(rec, LAUNCHING, "launch sent", now_s)
        return out

    def on_held(self, held: events_pb2.HeldPlacements, now_s: float) -> list[Outgoing]:
        """Keep the scheduler's placements for a running job's GPUs until that job ends
        (`_release` carries them out). The latest replaces the one before; a hold for an attempt
        that is not running (ended already, or an older one) is ignored."""
        rec = self.jobs.get(held.releasing_job_id)
        if rec is None or rec.job.state not in (LAUNCHING, RUNNING) \
                or held.releasing_attempt != rec.job.attempt:
            return []
        if held.placements:
            self.held[rec.id] = held
        elif self.held.pop(rec.id, None) is None:
            return []
        self._dirty_jobs.add(rec.id)
        return []

    def _launch_held(self, rec: JobRecord, now_s: float) -> tuple[list[Outgoing], dict[str, str]]:
        """The job's GPUs were just released after its success: launch the placements held for
        them, each only if it would pass as a JobPlaced now (its job waiting in that attempt,
        its GPUs free here). One that does not is dropped: the scheduler sees the availability
        and the job still queued, and places it the usual way. Returns the launches' events and,
        per node they use, a job placed there."""
        held = self.held.pop(rec.id, None)
        out: list[Outgoing] = []
        placed_on: dict[str, str] = {}
        if held is None or held.releasing_attempt != rec.job.attempt:
            return out, placed_on
        for placed in held.placements:
            waiting = self.jobs.get(placed.job_id)
            if waiting is None or waiting.job.state != QUEUED or placed.attempt != waiting.job.attempt \
                    or self._placement_problem(placed):
                continue
            out += self._place(waiting, placed,
                               f"{len(placed.assignments)} node(s), held for {rec.id}", now_s)
            placed_on.update({a.node_id: placed.job_id for a in placed.assignments})
        return out, placed_on

    def _placement_problem(self, placed: events_pb2.JobPlaced) -> str:
        """The shared check (frenzy.placement_check), against this core's nodes."""
        nodes = {a.node_id: NodeFacts(n.gpu_type, set(n.free_gpus), n.state == types_pb2.NODE_READY)
                 for a in placed.assignments if (n := self.nodes.get(a.node_id)) is not None}
        return placement_problem(placed.option.gpu_type, placed.option.num_gpus,
                                 placed.option.plan.tp,
                                 [(a.node_id, list(a.gpu_indices)) for a in placed.assignments], nodes)

    def _launch_commands(self, rec: JobRecord) -> list[Outgoing]:
        job = rec.job
        master = self.nodes[job.assignments[0].node_id]
        out, offset = [], 0
        for rank, a in enumerate(job.assignments):
            launch = events_pb2.LaunchJob(
                job_id=job.id, node_id=a.node_id, attempt=job.attempt, gpu_indices=a.gpu_indices,
                node_rank=rank, num_nodes=len(job.assignments), world_size=job.option.num_gpus,
                rank_offset=offset, master_addr=master.host,
                master_port=master_port(job.id, job.attempt), option=job.option, spec=job.spec,
                resume_from_step=job.resumed_from_step,
                checkpoint_uri=job.spec.training.checkpoint_uri)
            offset += len(a.gpu_indices)
            out.append(Outgoing(topics.AGENT_COMMANDS, a.node_id, launch))
        return out

    def _stop_commands(self, rec: JobRecord, reason: str, skip: str = "") -> list[Outgoing]:
        return [Outgoing(topics.AGENT_COMMANDS, a.node_id, events_pb2.StopJob(
                    job_id=rec.id, node_id=a.node_id, reason=reason, attempt=rec.job.attempt))
                for a in rec.job.assignments if a.node_id != skip and a.node_id in self.nodes
                and self.nodes[a.node_id].state == types_pb2.NODE_READY]

    def _release(self, rec: JobRecord, cause: str, now_s: float | None = None) -> list[Outgoing]:
        """Take the job's GPUs off its record. Where the node's last heartbeat still runs this
        attempt and its agent has not reported its end (a cancel, or the other nodes of a job
        one node failed), the process may still hold the GPUs: they stay fenced, as the next
        heartbeats would fence them anyway, until a heartbeat shows them released. Freed at
        once, they flapped free -> fenced -> free, and a placement made in between was
        rejected (the scheduler then placed the job on what was left).

        With `now_s` (the job succeeded), the placements held for its GPUs launch in the same
        step (`_launch_held`), and each node's availability is published once, after them: the
        scheduler never sees the GPUs free that a held job took."""
        out: list[Outgoing] = []
        entry = f"{rec.id}:{rec.job.attempt}"
        nodes = []
        for a in rec.job.assignments:
            node = self.nodes.get(a.node_id)
            if node is None:
                continue
            still_running = entry in node.running_jobs and entry not in node.reported_ended
            for gpu in a.gpu_indices:
                if node.allocations.get(gpu) == rec.id:
                    del node.allocations[gpu]
                    if still_running:
                        node.fenced_gpus.add(gpu)
            nodes.append(node)
        others: list[Outgoing] = []
        if now_s is not None:
            out, placed_on = self._launch_held(rec, now_s)
            released = {node.node_id for node in nodes}
            others = [self._availability(self.nodes[n], f"job {job_id} placed")
                      for n, job_id in placed_on.items() if n not in released]
        self.held.pop(rec.id, None)  # whatever ended it, a hold for its GPUs is spent
        return out + [self._availability(node, cause) for node in nodes] + others

    def on_agent_status(self, status: events_pb2.JobStatusChanged, now_s: float) -> list[Outgoing]:
        node = self.nodes.get(status.node_id)
        if node is not None and status.state in (SUCCEEDED, FAILED):
            node.reported_ended.add(f"{status.job_id}:{status.attempt}")
        rec = self.jobs.get(status.job_id)
        if rec is None or rec.job.state in lifecycle.TERMINAL or status.attempt != rec.job.attempt:
            return []
        if status.node_id not in rec.node_outcomes or rec.job.state not in (LAUNCHING, RUNNING):
            return []
        job = rec.job
        self._dirty_jobs.add(job.id)
        if status.HasField("progress") and status.progress.step >= job.progress.step:
            job.progress.CopyFrom(status.progress)
        if status.HasField("checkpoint_step") and status.checkpoint_step > job.checkpoint_step:
            job.checkpoint_step = status.checkpoint_step  # commits only move forward
        if status.state == RUNNING:
            rec.node_outcomes[status.node_id] = RUNNING
            if job.state == LAUNCHING:
                return self._transition(rec, RUNNING, "processes started", now_s)
            return self._progress_update(rec)
        if status.state == SUCCEEDED:
            rec.node_outcomes[status.node_id] = SUCCEEDED
            if all(s == SUCCEEDED for s in rec.node_outcomes.values()):
                self._record_memory_error(job)
                out = self._release(rec, f"job {job.id} finished", now_s)
                return self._transition(rec, SUCCEEDED, "all processes exited 0", now_s) + out
            return []
        if status.state == FAILED and status.reason.startswith(PREEMPTED_REASON):
            return self._on_preempted(rec, status, now_s)
        if status.state == FAILED:
            job.exit_code = status.exit_code
            rec.node_outcomes[status.node_id] = FAILED
            if status.reason.startswith(OOM_REASON):
                self._record_memory_error(job)
            out = self._stop_commands(rec, "another node failed", skip=status.node_id)
            out += self._release(rec, f"job {job.id} failed")
            if status.reason.startswith(OOM_REASON) and rec.oom_replans < self.max_oom_replans:
                return out + self._replan_after_oom(rec, status, now_s)
            if status.reason.startswith((RENDEZVOUS_REASON, LOST_REASON)):
                # Nothing the program did: the group did not form, or its processes vanished
                # (killed with their agent's container). A new attempt, from the checkpoint.
                return out + self._requeue(rec, f"{status.reason} (node {status.node_id})", now_s)
            return self._transition(rec, FAILED, status.reason or f"exit code {status.exit_code}", now_s) + out
        return []

    # ----- checkpoint-now: preemption, resize, migration ---------------------------------
    def on_reshape(self, reshape: events_pb2.ReshapeJob, now_s: float) -> list[Outgoing]:
        """Carry out a ReshapeJob: ask every node for a checkpoint and exit (StopJob with
        checkpoint_first). The rest happens when they report PREEMPTED (`_on_preempted`).
        Idempotent: a stale attempt, a job not running or a reshape already under way is ignored."""
        rec = self.jobs.get(reshape.job_id)
        if rec is None or rec.job.state != RUNNING or reshape.attempt != rec.job.attempt \
                or rec.pending_reshape is not None:
            return []
        kind = events_pb2.ReshapeKind.Name(reshape.kind)
        if reshape.kind not in (events_pb2.RESIZE, events_pb2.MIGRATE, events_pb2.PREEMPT) or (
                reshape.kind != events_pb2.PREEMPT and not reshape.assignments):
            return []
        rec.pending_reshape = events_pb2.ReshapeJob()
        rec.pending_reshape.CopyFrom(reshape)
        # In the job record, so the scheduler (also a restarted one) moves it no further until
        # this is done, and keeps its minimum time between reshapes from here.
        rec.job.reshaping = True
        rec.job.reshaped_at.FromNanoseconds(int(now_s * 1e9))
        rec.job.reason = f"{kind}: checkpointing"
        self._dirty_jobs.add(rec.id)
        stops = [Outgoing(topics.AGENT_COMMANDS, a.node_id, events_pb2.StopJob(
                     job_id=rec.id, node_id=a.node_id, reason=kind, attempt=rec.job.attempt,
                     checkpoint_first=True))
                 for a in rec.job.assignments if a.node_id in self.nodes]
        return stops + self._progress_update(rec)

    def _on_preempted(self, rec: JobRecord, status: events_pb2.JobStatusChanged,
                      now_s: float) -> list[Outgoing]:
        """A node saved (or was stopped) on checkpoint-now. Once every node has, release the
        GPUs and start a new attempt from the last committed checkpoint: on the reshape's
        GPUs (RESIZE, MIGRATE), else back in the queue (PREEMPT, or a preemption from outside)."""
        rec.node_outcomes[status.node_id] = FAILED
        if any(s in (LAUNCHING, RUNNING) for s in rec.node_outcomes.values()):
            return []  # other nodes are still saving
        job = rec.job
        reshape = rec.pending_reshape
        self._end_reshape(rec)
        out = self._release(rec, f"job {job.id} preempted")
        rec.free_attempts += 1
        cause = f"{status.reason} (node {status.node_id})"
        if reshape is None or reshape.kind == events_pb2.PREEMPT:
            return self._requeue(rec, cause, now_s) + out
        out = self._requeue(rec, f"{events_pb2.ReshapeKind.Name(reshape.kind)}: {cause}", now_s) + out
        placed = events_pb2.JobPlaced(job_id=job.id, option=reshape.option, attempt=job.attempt,
                                      assignments=reshape.assignments,
                                      placement_id=reshape.placement_id)
        if reshape.HasField("decision"):
            placed.decision.CopyFrom(reshape.decision)
        return out + self.on_placed(placed, now_s)  # rejected: it stays queued for HAS

    @staticmethod
    def _end_reshape(rec: JobRecord) -> None:
        rec.pending_reshape = None
        rec.job.reshaping = False

    def _record_memory_error(self, job: types_pb2.Job) -> None:
        """How far MARP's prediction for the plan was from the peak the job measured. Agents
        measure max_memory_allocated, so it is compared with the allocated peak, like for like
        (options planned before the three peaks carry only the device peak)."""
        measured = job.progress.peak_memory_bytes
        predicted = job.option.peak_allocated_bytes or job.option.peak_bytes_per_gpu
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

    def fail(self, job_id: str, reason: str, now_s: float) -> list[Outgoing]:
        """End a live job with a reason: the shell calls this when handling one of its events
        raised, so a bug or an input nobody foresaw ends the job instead of parking it."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.state in lifecycle.TERMINAL:
            return []
        out = self._stop_commands(rec, reason) + self._release(rec, f"job {job_id} failed")
        return self._transition(rec, FAILED, reason, now_s) + out

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
        healthy_before, fenced_before = node.free_gpus, set(node.fenced_gpus)
        if cause or hb.agent_restarts != node.agent_restarts:  # seen alive again
            out += self._resend_cleanup(node.node_id, now_s)
        node.host, node.agent_pid, node.last_heartbeat_s = hb.host or node.host, hb.agent_pid, now_s
        node.agent_restarts = hb.agent_restarts
        node.gpus = list(hb.gpus)
        node.gpu_type, node.gpus_total = gpu_type or node.gpu_type, len(hb.gpus) or node.gpus_total
        node.running_jobs = list(hb.running_jobs)
        out += self._reconcile(node, hb, now_s)
        if cause or node.free_gpus != healthy_before:
            if not cause:
                if node.fenced_gpus - fenced_before:
                    cause = "stale attempt fenced"
                elif fenced_before - node.fenced_gpus:
                    cause = "stopped attempt's GPUs released"
                else:
                    cause = "GPU health changed"
            out.append(self._availability(node, cause))
        return out

    def _current_here(self, job_id: str, attempt: int, node_id: str) -> bool:
        rec = self.jobs.get(job_id)
        return (rec is not None and rec.job.state in (PLACED, LAUNCHING, RUNNING)
                and rec.job.attempt == attempt and node_id in rec.node_outcomes)

    def _reconcile(self, node: NodeRecord, hb: events_pb2.NodeHeartbeat, now_s: float) -> list[Outgoing]:
        """Compare what the agent runs with what these records say runs there.

        A process of an attempt that is not current is stopped (again every STOP_RESEND_S while
        it shows), and the GPUs it holds are fenced; not so for an attempt whose end this agent
        has already reported: the heartbeat is older than that report (heartbeats come through
        their own, slower consumer), and fencing on it held freed GPUs for a heartbeat interval
        (docs/architecture.md, "Reaction latency"). A confirmed running attempt that the agent
        lists neither as running nor as ended for a node timeout is lost: it is retried like a
        job on a lost node. (Heartbeats and job statuses travel on different topics and
        consumers, so an ended attempt's status can arrive many seconds after the heartbeat
        that no longer runs it; the ended list keeps that from looking like a loss.)
        """
        out: list[Outgoing] = []
        node.known_attempts = set(hb.running_jobs) | set(hb.ended_jobs)
        node.reported_ended &= set(hb.running_jobs)  # the later heartbeats will not list them
        # Jobs whose GPUs this heartbeat shows only from before their end was reported.
        stale_claims = {e.rpartition(":")[0] for e in hb.running_jobs if e in node.reported_ended} \
            - {e.rpartition(":")[0] for e in hb.running_jobs if e not in node.reported_ended}
        for entry in hb.running_jobs:
            job_id, _, attempt_text = entry.rpartition(":")
            try:
                attempt = int(attempt_text)
            except ValueError:
                continue
            if entry in node.reported_ended:
                continue
            if self._current_here(job_id, attempt, node.node_id):
                node.stops_sent_s.pop(entry, None)
                continue
            if now_s - node.stops_sent_s.get(entry, float("-inf")) >= STOP_RESEND_S:
                node.stops_sent_s[entry] = now_s
                out.append(Outgoing(topics.AGENT_COMMANDS, node.node_id, events_pb2.StopJob(
                    job_id=job_id, node_id=node.node_id, attempt=attempt,
                    reason=f"attempt {attempt} is not current (reconciliation)")))
        node.fenced_gpus = {g.index for g in hb.gpus if g.job_id and g.job_id not in stale_claims
                            and node.allocations.get(g.index) != g.job_id}
        for job_id in sorted(set(node.allocations.values())):
            rec = self.jobs[job_id]
            if rec.job.state != RUNNING or rec.node_outcomes.get(node.node_id) != RUNNING:
                continue
            if f"{job_id}:{rec.job.attempt}" in node.known_attempts:  # running, or its end
                rec.missing_since_s.pop(node.node_id, None)  # is reported and on its way
                continue
            since = rec.missing_since_s.setdefault(node.node_id, now_s)
            if now_s - since > self.node_timeout_s:
                cause = f"attempt {rec.job.attempt} no longer runs on node {node.node_id}"
                out += self._stop_commands(rec, cause)
                out += self._release(rec, f"job {job_id} re-queued")
                out = self._requeue(rec, cause, now_s) + out
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

    def check_deadlines(self, now_s: float) -> list[Outgoing]:
        """End or retry every job that has sat in a state longer than that state allows."""
        if self.first_tick_s is None:
            self.first_tick_s = now_s
        nodes_settled = now_s - self.first_tick_s > self.node_timeout_s
        capacity: dict[str, int] = {}
        for node in self.nodes.values():  # lost nodes count: they may come back
            capacity[node.gpu_type] = capacity.get(node.gpu_type, 0) + node.gpus_total
        out: list[Outgoing] = []
        for rec in list(self.jobs.values()):
            state, age_s = rec.job.state, now_s - rec.since_s
            if state == SUBMITTED and age_s > self.plan_timeout_s:
                out += self._transition(rec, FAILED, f"no plan within {self.plan_timeout_s:g} s "
                                                     "(the predictor could not plan this spec)", now_s)
            elif state == QUEUED and rec.needs and nodes_settled and not any(
                    capacity.get(gpu_type, 0) >= gpus for gpu_type, gpus in rec.needs):
                wanted = ", ".join(f"{gpus}x{gpu_type}" for gpu_type, gpus in rec.needs[:5])
                have = ", ".join(f"{n}x{t}" for t, n in sorted(capacity.items())) or "no GPUs"
                out += self._transition(rec, FAILED, f"unschedulable: every plan needs more GPUs "
                                                     f"than the cluster has (wants {wanted}; "
                                                     f"cluster has {have})", now_s)
            elif state in (PLACED, LAUNCHING) and age_s > self.launch_timeout_s \
                    and not self._agent_has_it(rec):
                silent = sorted(n for n, s in rec.node_outcomes.items() if s == LAUNCHING)
                cause = f"launch timeout: no report from {', '.join(silent) or 'its nodes'} " \
                        f"within {self.launch_timeout_s:g} s"
                stops = self._stop_commands(rec, cause) + self._release(rec, f"job {rec.id} re-queued")
                out += self._requeue(rec, cause, now_s) + stops
        return out

    def _agent_has_it(self, rec: JobRecord) -> bool:
        """An agent's heartbeat lists the attempt (running or ended): it was launched, and only
        its status is slow to arrive, so a launch timeout would be wrong."""
        entry = f"{rec.id}:{rec.job.attempt}"
        return any(entry in self.nodes[n].known_attempts for n in rec.node_outcomes if n in self.nodes)

    def _requeue_lost(self, rec: JobRecord, node_id: str, now_s: float) -> list[Outgoing]:
        out = self._stop_commands(rec, f"node {node_id} lost", skip=node_id)
        out += self._release(rec, f"job {rec.id} re-queued")
        return self._requeue(rec, f"node {node_id} lost", now_s) + out

    def _requeue(self, rec: JobRecord, cause: str, now_s: float) -> list[Outgoing]:
        """Not the job's fault (a lost node, a process group that did not form, a preemption):
        run it again as a new attempt, which resumes from the last committed checkpoint on a
        new master port, or fail after max retries (preemptions and reshapes do not count)."""
        job = rec.job
        if job.attempt - rec.free_attempts >= self.max_retries:
            return self._transition(rec, FAILED, f"{cause}; retries exhausted", now_s)
        job.attempt += 1
        job.ClearField("option")
        job.ClearField("progress")
        del job.assignments[:]
        rec.node_outcomes = {}
        # A reshape under way belonged to the attempt that ended (its node was lost, say): the
        # new attempt is placed afresh, and a later ReshapeJob for it is not taken as a duplicate.
        self._end_reshape(rec)
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
            nodes_lost=len(self.nodes) - ready, memory_prediction=stats,
            agent_restarts=sum(n.agent_restarts for n in self.nodes.values()))

    def queued_count(self) -> int:
        return sum(1 for r in self.jobs.values() if r.job.state in (SUBMITTED, PLANNED, QUEUED))
