"""The live scheduler's view (pure): queue, cluster and in-flight placements, rebuilt from events.

A job becomes schedulable when both its options (JobPlanned) and the orchestrator's QUEUED state
for the same attempt have arrived; topics are not ordered relative to each other, so either may
come first. A placement stays "pending" until the orchestrator's availability events show it,
so the policy never sees those GPUs as free in between.

Jobs holding GPUs are passed to the policy as `running` (what `has` needs to estimate when GPUs
free up): from our own placements at once, then from the orchestrator's job records (PLACED,
LAUNCHING, RUNNING carry the option, the assignments and the placed/started times). The
expected end is the start plus MARP's predicted duration for the work left at this start (the
steps after `resumed_from_step`); once that has passed, the end is unknown and the job is shown
as ending never (so `has` does not hold jobs for its GPUs). With progress reports, the view also
carries the step, the progress rate measured between the first step this scheduler saw of the
attempt and the latest (startup excluded), and the checkpoint age: the newest committed
checkpoint and when it was seen, and whether the job saves on request (it has committed one, so
it speaks the checkpoint contract; a job that never has is taken to lose its work on a move).

Reshapes (resize, migrate, preempt; on by default, FRENZY_RESHAPE_JOBS) are for jobs that can
resume (`frenzy_scheduler.reshapable`): any other running job reaches the policy without its
option menu, which no policy reshapes, and a reshape of it is dropped whatever the policy. The
menu of a job whose progress rate is measured is put in the job's own time: MARP's durations
times the measured / predicted time of its current option (MARP's relative speeds, the job's
absolute one), so that the gain of a move and its restart cost, measured as the time from the
attempt's placement to its first step, are in the same seconds. While a reshape this scheduler
published is under way, the GPUs it names stay taken in the view.

Every action the policy returns is checked by the shared placement check
(`frenzy.placement_check`, the one the orchestrator and the simulator use) against the free
GPUs; a failing one is dropped, not published.

Holds ahead (`holds_ahead`, with a `hold_policy`): for the running jobs expected to end first, the
policy is run again as if each had just ended, and the placements that take its GPUs are
published for the orchestrator to launch on that job's end, in the same step as its release
(HeldPlacements). The orchestrator validates them then; the view learns the outcome from its
availability and job records as for any placement (docs/architecture.md, "Reaction latency").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from frenzy.convert import option_from_proto
from frenzy.domain import PlanOption
from frenzy.jobstates import HOLDING, TERMINAL
from frenzy.logs import get_logger
from frenzy.placement_check import NodeFacts, placement_problem
from frenzy.v1 import events_pb2, types_pb2
from frenzy_scheduler.core import (PLACE, PREEMPT, ClusterView, NodeState, Placement, Policy,
                                  QueuedJob, RunningJob)
from frenzy_scheduler.policies.fifo import FifoPolicy
from frenzy_scheduler.reshapable import ReshapeFacts, ReshapeRules, reshape_facts, reshape_veto

log = get_logger("scheduler")
# A running job whose estimated end passed longer ago than this is not "about to end" any more
# (it overruns, or hangs): no hold waits for it. Within it, it is the likeliest to end next: a
# job that runs as estimated reports its end just after the estimate (its last step, its exit).
HOLD_OVERDUE_S = 60.0



@dataclass
class _Job:
    submit_time_s: float
    deadline_s: float = 0.0
    options: dict[int, list[PlanOption]] = field(default_factory=dict)  # attempt -> options
    queued_attempt: int = -1  # the attempt the orchestrator last put in QUEUED; -1: not waiting
    version: int = 0  # last orchestrator job version seen


@dataclass
class _Seen:
    """What this scheduler saw of a running attempt: its first reported step and when (the
    progress rate's base), and when its newest committed checkpoint was first reported."""

    attempt: int
    first_step: int
    first_step_s: float
    checkpoint_step: int = -1
    checkpoint_s: float = 0.0


@dataclass
class LiveState:
    policy: Policy
    cluster: ClusterView = field(default_factory=ClusterView)
    node_versions: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, _Job] = field(default_factory=dict)
    pending: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)  # job -> node -> GPUs
    running: dict[str, RunningJob] = field(default_factory=dict)  # jobs holding GPUs
    rules: ReshapeRules | None = None  # None: publish no reshapes (FRENZY_RESHAPE_JOBS off)
    attempts: dict[str, int] = field(default_factory=dict)  # running job -> its attempt
    seen: dict[str, _Seen] = field(default_factory=dict)  # running job -> its progress seen
    facts: dict[str, ReshapeFacts] = field(default_factory=dict)  # running job -> reshape rules' input
    # Reshapes this scheduler published and has not seen carried out: job -> (the attempt it
    # changes, the GPUs it will take).
    reshaping: dict[str, tuple[int, dict[str, tuple[int, ...]]]] = field(default_factory=dict)
    # The latest reshape this scheduler published of each job: job -> (the attempt it changed,
    # when it was decided). The next attempt's restart is measured from that decision.
    moved: dict[str, tuple[int, float]] = field(default_factory=dict)
    # A second instance of the policy for the holds ahead (its own caches: a what-if run must
    # not disturb the ones the live decisions keep); None: no holds.
    hold_policy: Policy | None = None
    # The latest holds published, per running job whose end they wait for: (job, attempt, GPUs,
    # option) of each held placement. Unchanged holds are not published again.
    held: dict[str, tuple[tuple[str, int, tuple[tuple[str, tuple[int, ...]], ...], PlanOption], ...]] = \
        field(default_factory=dict)

    def on_planned(self, planned: events_pb2.JobPlanned) -> None:
        job = self.jobs.setdefault(planned.job_id, _Job(
            planned.submitted_at.ToNanoseconds() / 1e9 or time.time(),
            planned.deadline.ToNanoseconds() / 1e9 if planned.HasField("deadline") else 0.0))
        job.options[planned.attempt] = [option_from_proto(o) for o in planned.options]

    def on_status(self, status: events_pb2.JobStatusChanged, now_s: float | None = None) -> None:
        if status.source != events_pb2.ORCHESTRATOR:
            return
        job = self.jobs.get(status.job_id)
        version = status.job.version
        if job is None:
            if status.state in TERMINAL:
                return
            job = self.jobs.setdefault(status.job_id, _Job(
                status.job.submitted_at.ToNanoseconds() / 1e9 or time.time()))
        if version and version <= job.version:
            return  # an older state, delivered late
        job.version = version
        sent = self.reshaping.get(status.job_id)
        if sent is not None and (status.attempt > sent[0] or status.state in TERMINAL):
            del self.reshaping[status.job_id]  # carried out (or the job ended)
        if status.state in HOLDING:
            self.attempts[status.job_id] = status.attempt
            ours = self.pending.get(status.job_id)
            theirs = {a.node_id: tuple(a.gpu_indices) for a in status.job.assignments}
            if ours is not None and theirs and any(theirs.get(n) != g for n, g in ours.items()):
                # Placed elsewhere (a hold carried out before our placement came): ours was
                # ignored, and its GPUs must not stay hidden from the policy.
                del self.pending[status.job_id]
            self._note_running(status.job, job, time.time() if now_s is None else now_s)
        else:
            self.held.pop(status.job_id, None)  # it no longer holds GPUs: nothing waits for them
            self.running.pop(status.job_id, None)
            self.attempts.pop(status.job_id, None)
            self.seen.pop(status.job_id, None)
            self.facts.pop(status.job_id, None)
        if status.state in TERMINAL:
            self.jobs.pop(status.job_id, None)
            self.pending.pop(status.job_id, None)
            self.moved.pop(status.job_id, None)
        elif status.state == types_pb2.QUEUED:
            job.queued_attempt = status.attempt
            self.pending.pop(status.job_id, None)  # a rejected or lost placement
        elif status.state == types_pb2.SUBMITTED:
            job.queued_attempt = -1  # re-planning; wait for the new options

    def _note_running(self, record: types_pb2.Job, job: _Job, now_s: float) -> None:
        """Keep the orchestrator's view of a job holding GPUs (ours until it has one), with its
        progress and checkpoint age."""
        if not record.HasField("option") or not record.assignments:
            return
        start_s = next((stamp.ToNanoseconds() / 1e9 for stamp in (record.started_at,
                        record.placed_at) if stamp.ToNanoseconds() > 0), None)
        known = self.running.get(record.id)
        if start_s is None:
            start_s = known.start_time_s if known is not None else now_s
        step, steps, resumed = record.progress.step, record.progress.steps, record.resumed_from_step
        seen = self.seen.get(record.id)
        if seen is None or seen.attempt != record.attempt:
            seen = self.seen[record.id] = _Seen(record.attempt, step, now_s)
        elif seen.first_step <= resumed < step:  # its first training step: the rate's base
            seen.first_step, seen.first_step_s = step, now_s
        has_checkpoint = record.HasField("checkpoint_step")
        if has_checkpoint and record.checkpoint_step != seen.checkpoint_step:
            seen.checkpoint_step, seen.checkpoint_s = record.checkpoint_step, now_s
        # The checkpoint this attempt restored counts from its start (last_checkpoint_s 0).
        last_checkpoint_s = seen.checkpoint_s if has_checkpoint and record.checkpoint_step > resumed else 0.0
        fraction_at_start, rate, productive_from_s = 1.0, 0.0, 0.0
        if steps > 0:
            fraction_at_start = max(0.0, 1.0 - resumed / steps)
            if step > seen.first_step and now_s > seen.first_step_s:
                rate = (step - seen.first_step) / steps / (now_s - seen.first_step_s)
                # when it would have begun producing at that rate: launch and restore excluded
                productive_from_s = now_s - (step - resumed) / steps / rate
        full = option_from_proto(record.option)
        menu = tuple(job.options.get(record.attempt) or job.options.get(max(job.options, default=-1), []))
        restart_s = 0.0
        if rate > 0 and full.duration_s > 0:
            # In the job's own seconds: measured / predicted time of its current option.
            speed = 1.0 / (rate * full.duration_s)
            full = replace(full, duration_s=full.duration_s * speed)
            menu = tuple(replace(o, duration_s=o.duration_s * speed) for o in menu)
            restart_s = max(0.0, productive_from_s - self._restart_began_s(record, start_s))
            if not self._moved_into(record):  # the measure holds no save: add the last one's
                restart_s += record.progress.checkpoint_write_s
        option = replace(full, duration_s=full.duration_s * fraction_at_start)
        assignments = tuple((a.node_id, tuple(a.gpu_indices)) for a in record.assignments)
        self.running[record.id] = RunningJob(
            record.id, option, assignments, start_s, start_s + option.duration_s, menu,
            fraction_at_start, productive_from_s, job.submit_time_s, job.deadline_s, rate,
            restarts=record.attempt, step=step, steps=steps,
            checkpoint_step=record.checkpoint_step, last_checkpoint_s=last_checkpoint_s,
            saves_on_request=has_checkpoint, restart_s=restart_s)
        self.facts[record.id] = reshape_facts(record, start_s)

    def _restart_began_s(self, record: types_pb2.Job, start_s: float) -> float:
        """Where this attempt's restart is measured from, to its first productive step. An
        attempt that a reshape of ours started: the reshape's decision, so the measure holds all
        that a move costs (the save on request, the stop, the relaunch, the restore), which is
        what the next move will cost. Any other attempt: its placement (else its start), which
        leaves out the save and the stop (its first start measured a third of what its moves
        took, docs/has.md "Live"); the caller adds the save its trainer last reported."""
        if self._moved_into(record):
            return self.moved[record.id][1]
        placed_s = record.placed_at.ToNanoseconds() / 1e9 or start_s
        return min(placed_s, start_s)

    def _moved_into(self, record: types_pb2.Job) -> bool:
        """Whether a reshape this scheduler published started this attempt."""
        moved = self.moved.get(record.id)
        return moved is not None and record.attempt == moved[0] + 1

    def on_availability(self, event: events_pb2.GpuAvailabilityChanged) -> None:
        if event.version and event.version <= self.node_versions.get(event.node_id, 0):
            return
        self.node_versions[event.node_id] = event.version
        free = list(event.free_gpu_indices) if event.node_state == types_pb2.NODE_READY else []
        self.cluster.nodes[event.node_id] = NodeState(event.node_id, event.gpu_type,
                                                      event.gpus_total, free)
        held = {(job_id, attempt) for hold in self.held.values() for job_id, attempt, *_ in hold}
        for job_id in event.allocated_jobs:  # the orchestrator now shows these placements
            job = self.jobs.get(job_id)
            if job is not None and (job_id, job.queued_attempt) in held and job_id not in self.pending:
                job.queued_attempt = -1  # launched from a hold on a release; its record follows
            nodes = self.pending.get(job_id)
            if nodes is not None:
                nodes.pop(event.node_id, None)
                if not nodes:
                    del self.pending[job_id]

    def restore(self, planned: list[events_pb2.JobPlanned], jobs: list[types_pb2.Job],
                nodes: list[events_pb2.GpuAvailabilityChanged]) -> None:
        """Rebuild after a restart from the latest plan of each job, the orchestrator's job
        records and the latest availability of each node; later events apply on top as usual
        (job and node versions drop the stale ones)."""
        for event in planned:
            self.on_planned(event)
        for job in jobs:
            self.on_status(events_pb2.JobStatusChanged(
                job_id=job.id, state=job.state, reason=job.reason, attempt=job.attempt,
                source=events_pb2.ORCHESTRATOR, job=job))
        for event in nodes:
            self.on_availability(event)

    def waiting(self) -> list[QueuedJob]:
        queue = []
        for job_id, job in self.jobs.items():
            if job.queued_attempt < 0 or job_id in self.pending:
                continue
            # A retry after a lost node keeps its plans; a re-plan (after OOM) has its own.
            planned = [a for a in job.options if a <= job.queued_attempt]
            if planned:
                queue.append(QueuedJob(job_id, job.submit_time_s, job.options[max(planned)],
                                       job.deadline_s, job.queued_attempt))
        return queue

    def next_change_s(self, now_s: float) -> float | None:
        """When this view changes with no event: the first running job to pass its predicted
        end after `now_s`, from which it is shown as ending never (`schedule`), so a job held
        for its GPUs should be decided again then. None: no running job has an end ahead."""
        return min((r.expected_end_s for r in self.running.values() if r.expected_end_s > now_s),
                   default=None)

    def effective_cluster(self) -> ClusterView:
        view = self.cluster.copy()
        for nodes in [*self.pending.values(), *(gpus for _, gpus in self.reshaping.values())]:
            for node_id, gpus in nodes.items():
                node = view.nodes.get(node_id)
                if node is not None:
                    node.free_gpus = [g for g in node.free_gpus if g not in gpus]
        return view

    def veto(self, job_id: str, now_s: float) -> str | None:
        """Why a running job may not be reshaped now (`frenzy_scheduler.reshapable`), or None."""
        if self.rules is None:
            return "reshapes are off (FRENZY_RESHAPE_JOBS)"
        if job_id in self.reshaping:
            return "a reshape is in flight"
        facts = self.facts.get(job_id)
        if facts is None:
            return "no record from the orchestrator yet"
        return reshape_veto(facts, now_s, self.rules)

    def _marp_option(self, job_id: str, option: PlanOption) -> PlanOption:
        """The job's option as MARP planned it (its menu here is in the job's own seconds):
        what the reshape publishes and the job's record keeps."""
        job = self.jobs.get(job_id)
        for options in (job.options.values() if job else ()):
            for planned in options:
                if planned.gpu_type == option.gpu_type and planned.plan == option.plan:
                    return planned
        return option

    def schedule(self, now_s: float) -> list[tuple[Placement, int]]:
        """Run the policy; returns each checked action with the job attempt it is for."""
        queue = self.waiting()
        movable = {job_id for job_id in self.running if self.veto(job_id, now_s) is None}
        if not queue and not movable:
            return []
        running = self._running_as_shown(now_s, movable)
        view = self.effective_cluster()
        actions = self._answer(self.policy, queue, view, now_s, running)
        for action in actions:  # releases first, as the orchestrator executes them
            if action.kind != PLACE and action.job_id in movable:
                view.give_back(self.running[action.job_id].assignments)
        placed = []
        for p in actions:
            if p.kind != PLACE:
                if p.job_id not in movable:
                    continue
                attempt = self.attempts.get(p.job_id, 0)
                p = p.replaced(self._marp_option(p.job_id, p.option))
            else:
                job = self.jobs.get(p.job_id)
                if job is None or job.queued_attempt < 0:
                    continue
                attempt = job.queued_attempt
            if p.kind != PREEMPT:
                problem = _placement_problem(p, view)
                if problem:
                    log.warning("action dropped", job_id=p.job_id, kind=p.kind, reason=problem)
                    continue
                view.take(p.assignments)
                gpus_by_node = {node: gpus for node, gpus in p.assignments}
                if p.kind == PLACE:
                    self.pending[p.job_id] = gpus_by_node
                    self.running[p.job_id] = RunningJob(p.job_id, p.option, p.assignments, now_s,
                                                        now_s + p.option.duration_s)
                else:  # it keeps running as it is until the orchestrator carries this out
                    self.reshaping[p.job_id] = (attempt, gpus_by_node)
                    self.moved[p.job_id] = (attempt, now_s)
            else:
                self.reshaping[p.job_id] = (attempt, {})
                self.moved[p.job_id] = (attempt, now_s)
            if p.kind == PLACE:
                self.jobs[p.job_id].queued_attempt = -1
            placed.append((p, attempt))
        return placed

    @staticmethod
    def _answer(policy: Policy, queue: list[QueuedJob], view: ClusterView, now_s: float,
                running: list[RunningJob], fallback: bool = True) -> list[Placement]:
        """The policy's actions. A policy that raises must not take the scheduler down with it:
        restarted, it would read the same state back and raise again, and no job would ever be
        placed. The error is logged with its traceback, and this decision falls back to FIFO
        placement of the queue (no reshapes; every action is checked as usual), or to nothing
        for a what-if run (`fallback=False`: the holds ahead)."""
        try:
            return policy.schedule(queue, view, now_s, running)
        except Exception:
            log.exception("policy failed" + ("; fifo places this decision" if fallback else ""),
                          policy=getattr(policy, "name", type(policy).__name__),
                          queued=len(queue), running=len(running),
                          job_ids=[job.job_id for job in queue[:10]])
            return FifoPolicy().schedule(queue, view, now_s) if fallback else []

    def _running_as_shown(self, now_s: float, movable: set[str]) -> list[RunningJob]:
        """The running jobs as the policy sees them. A job past its predicted end will end at
        some unknown time: no policy should hold GPUs waiting for it, so it is shown as ending
        never. A job that may not be reshaped (not in `movable`) comes without its menu (no
        policy reshapes a job without options)."""
        return [r if r.expected_end_s > now_s and (r.job_id in movable or not r.options) else
                replace(r, expected_end_s=r.expected_end_s if r.expected_end_s > now_s else math.inf,
                        options=r.options if r.job_id in movable else ())
                for r in self.running.values()]

    def holds_ahead(self, now_s: float, count: int) -> list[tuple[str, int, list[tuple[Placement, int]]]]:
        """Placements held for the GPUs of the `count` running jobs expected to end first (by
        their measured rate, else their predicted end; those just past it first, up to
        HOLD_OVERDUE_S): for each, the hold policy run as if that
        job had ended now, over the jobs still waiting after this decision (call it after
        `schedule`). Kept: its placements that use some of that job's GPUs (one on GPUs free
        now only is the usual path's to make), each passing the placement check. Returned only
        where they changed since last published: (running job, its attempt, [(placement, the
        placed job's attempt)]); an empty list withdraws the hold."""
        if self.hold_policy is None or count <= 0:
            return []
        queue = self.waiting()
        ends = sorted((r.estimated_end_s, job_id) for job_id, r in self.running.items()
                      if job_id in self.attempts and job_id not in self.pending
                      and job_id not in self.reshaping
                      and r.estimated_end_s > now_s - HOLD_OVERDUE_S)
        chosen = [job_id for end_s, job_id in ends[:count] if end_s < math.inf] if queue else []
        changed = []
        for job_id in [j for j in self.held if j not in chosen and self.held[j]]:
            self.held[job_id] = ()
            changed.append((job_id, self.attempts.get(job_id, 0), []))
        if not chosen:
            return changed
        running = self._running_as_shown(now_s, movable=set())  # a hold is never a reshape
        base = self.effective_cluster()
        for job_id in chosen:
            ending = self.running[job_id]
            view = base.copy()
            view.give_back(ending.assignments)
            freed = {(n, g) for n, gpus in ending.assignments for g in gpus}
            actions = self._answer(self.hold_policy, queue, view, now_s,
                                   [r for r in running if r.job_id != job_id], fallback=False)
            kept: list[tuple[Placement, int]] = []
            for p in actions:
                job = self.jobs.get(p.job_id)
                if p.kind != PLACE or job is None or job.queued_attempt < 0 \
                        or not any((n, g) in freed for n, gpus in p.assignments for g in gpus):
                    continue
                if _placement_problem(p, view):
                    continue
                view.take(p.assignments)
                kept.append((p, job.queued_attempt))
            signature = tuple((p.job_id, attempt, p.assignments, p.option) for p, attempt in kept)
            if self.held.get(job_id, ()) != signature:
                self.held[job_id] = signature
                changed.append((job_id, self.attempts[job_id], kept))
        return changed


def _placement_problem(p: Placement, view: ClusterView) -> str:
    """The shared placement check (frenzy.placement_check) of `p` against `view`'s free GPUs;
    "" when it passes."""
    nodes = {n: NodeFacts(node.gpu_type, set(node.free_gpus))
             for n, _ in p.assignments if (node := view.nodes.get(n)) is not None}
    return placement_problem(p.option.gpu_type, p.option.num_gpus, p.option.plan.tp,
                             p.assignments, nodes)
