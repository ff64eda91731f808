"""Scheduler service: JobPlanned, job states and GPU availability in; JobPlaced out, each with
the policy's decision record, and ReshapeJob for running jobs that can resume (on by default,
FRENZY_RESHAPE_JOBS; the rules: frenzy_scheduler.reshapable, docs/has.md "Live").

Event-driven: the policy runs after every fetched batch of events that can change a decision.
Once per batch, not once per event: in a burst a batch holds hundreds of status events, and
running the policy after each one kept a freed node's availability waiting behind all of them
(bench/e2e_latency.py, docs/architecture.md "Reaction latency"). GPU availability is urgent: it
is handled ahead of the status events fetched with it, and the policy runs at once on it, also
when it arrives while a long batch is being handled (`Bus.run_consumer`'s `urgent`).

And when the view changes with no event (`redecide_loop`): `has` may hold a job for GPUs it
expects a running job to free soon. If that job overruns its prediction and sends nothing (a user
program without progress reports), no event came, and the held job waited until it ended; so the
policy also runs when a running job passes its predicted end, and at least every
FRENZY_SCHEDULER_REDECIDE_S while jobs wait.

Holds ahead (`holds_loop`): after each decision, the placements the policy would make if one
of the first running jobs to end had just ended go out as HeldPlacements, for the orchestrator
to launch on that end (FRENZY_SCHEDULER_HOLDS_AHEAD; LiveState.holds_ahead). They are computed
after the decision's placements are out, so they never delay one.
"""
from __future__ import annotations

import asyncio
import time

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import ServiceSettings
from frenzy.convert import option_to_proto
from frenzy.jobstates import TERMINAL
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
from frenzy.security.wiring import scheduler_verifier, tenant_policies
from frenzy.statestore import read_state
from frenzy.v1 import events_pb2, types_pb2
from frenzy_scheduler import native
from frenzy_scheduler.core import PLACE, PREEMPT, RESIZE, Decision, Placement
from frenzy_scheduler.fairshare import FairSharePolicy, TenantShare
from frenzy_scheduler.livestate import LiveState
from frenzy_scheduler.reshapable import ReshapeRules
from frenzy_scheduler.policies import get_policy

GROUP = "frenzy-scheduler"
# The timer decides again this long after a running job's predicted end, not at it: a job that
# runs as predicted reports its end just after (the synthetic workload exactly so), and a run
# at that very moment only raced the availability its end brings (bench/e2e_latency.py: 63
# such runs with 40-170 jobs queued delayed availability to decision p99 129 -> 305 ms). An
# overrun worth re-deciding for lasts minutes, not seconds.
OVERDUE_GRACE_S = 2.0
log = get_logger("scheduler")


class SchedulerService:
    def __init__(self, bus: Bus, policy_name: str, settings: ServiceSettings | None = None) -> None:
        """`settings` (default: from the environment) say whether running jobs are reshaped,
        under which rules, and the policy's minimum gain of a move."""
        self.bus = bus
        settings = settings or ServiceSettings()
        # Tenants share GPUs by weight, within their quotas (frenzy_scheduler.fairshare); each
        # job's tenant comes from the orchestrator's signed job records.
        self.tenants: dict[str, str] = {}
        policies = tenant_policies(settings)
        shares = lambda: {n: TenantShare(p.weight, p.max_gpus) for n, p in policies().items()}  # noqa: E731
        # has plans moves under the orchestrator's own guard (FRENZY_RESHAPE_MIN_INTERVAL_S)
        make_policy = lambda: get_policy(  # noqa: E731
            policy_name, elastic=settings.reshape_jobs, min_gain_s=settings.reshape_min_gain_s,
            min_gain_fraction=settings.reshape_min_gain_fraction,
            reshape_interval_s=settings.reshape_min_interval_s)
        policy = make_policy()
        rules = ReshapeRules(settings.reshape_min_interval_s, settings.reshape_young_s) \
            if settings.reshape_jobs else None
        self._holds_ahead = settings.scheduler_holds_ahead
        hold_policy = FairSharePolicy(make_policy(), self._tenant_of, shares) \
            if self._holds_ahead > 0 else None
        self.state = LiveState(FairSharePolicy(policy, self._tenant_of, shares), rules=rules,
                               hold_policy=hold_policy)
        self._holds_due = asyncio.Event()  # a decision was made: the holds ahead may change
        self._changed = False  # an event since the policy last ran
        self._redecide_s = settings.scheduler_redecide_s
        self._decided = asyncio.Event()  # set after each run: the timer re-arms
        self._lock = asyncio.Lock()  # one policy run at a time: the consumer's or the timer's

    def _tenant_of(self, job_id: str) -> str:
        return self.tenants.get(job_id, "")

    async def _schedule(self) -> None:
        async with self._lock:
            await self._decide_and_publish()
        self._decided.set()
        self._holds_due.set()

    async def holds_loop(self) -> None:
        """After decisions, publish the holds ahead that changed (the module's docstring). It
        yields first, so records already fetched (an availability) are handled before it."""
        while True:
            await self._holds_due.wait()
            await asyncio.sleep(0)
            self._holds_due.clear()
            async with self._lock:
                try:
                    await self._publish_holds()
                except Exception:  # a hold is an optimisation: the usual path still places
                    log.exception("holds ahead failed")

    async def _publish_holds(self) -> None:
        started = time.perf_counter()
        now_s = time.time()
        holds = self.state.holds_ahead(now_s, self._holds_ahead)
        elapsed_s = time.perf_counter() - started
        messages = []
        for ending_id, ending_attempt, kept in holds:
            message = events_pb2.HeldPlacements(releasing_job_id=ending_id,
                                                releasing_attempt=ending_attempt)
            message.placements.extend(
                _job_placed(p, attempt, decision_to_proto(p.decision, self.state.policy.name,
                                                          now_s, elapsed_s))
                for p, attempt in kept)
            messages.append((topics.JOBS_PLACED, ending_id, message))
        if messages:
            await self.bus.publish_many(messages, trace_ids=[key for _, key, _ in messages])
        for ending_id, _, kept in holds:
            log.info("held ahead", job_id=ending_id, jobs=[p.job_id for p, _ in kept],
                     decision_s=round(elapsed_s, 6))

    async def _decide_and_publish(self) -> None:
        started = time.perf_counter()
        now_s = time.time()
        actions = self.state.schedule(now_s)
        elapsed_s = time.perf_counter() - started
        messages: list[events_pb2.JobPlaced | events_pb2.ReshapeJob] = []
        for p, attempt in actions:
            record = decision_to_proto(p.decision, self.state.policy.name, now_s, elapsed_s)
            if p.kind == PLACE:
                message = _job_placed(p, attempt, record)
            else:
                message = events_pb2.ReshapeJob(
                    job_id=p.job_id, kind=_RESHAPE_KINDS[p.kind], attempt=attempt,
                    placement_id=f"{p.job_id}:{time.time_ns()}", decision=record,
                    option=None if p.kind == PREEMPT else option_to_proto(p.option),
                    assignments=[] if p.kind == PREEMPT else _assignments(p))
            messages.append(message)
        # Pipelined: one broker round trip for all of them, not one per placement (several jobs
        # often start on the GPUs one job freed).
        placements = [p for p, _ in actions]
        await self.bus.publish_many([(topics.JOBS_PLACED, p.job_id, m) for p, m in zip(placements, messages)],
                                    trace_ids=[p.job_id for p in placements])
        for p, message in zip(placements, messages):
            record = message.decision
            log.info("placed" if p.kind == PLACE else p.kind, job_id=p.job_id,
                     gpu_type=p.option.gpu_type, num_gpus=p.option.num_gpus,
                     plan=p.option.plan.describe(), nodes=[n for n, _ in p.assignments],
                     reason=record.reason, decision_s=round(elapsed_s, 6))

    async def schedule_if_changed(self) -> None:
        """After each batch, before its offsets are committed: the placements it led to are
        published first, so a crash in between redelivers the batch (at-least-once)."""
        if self._changed:
            self._changed = False
            await self._schedule()

    async def redecide_loop(self) -> None:
        """Run the policy when the view changes with no event (the module's docstring): just
        after the first running job's predicted end (OVERDUE_GRACE_S), and at least every
        FRENZY_SCHEDULER_REDECIDE_S, while jobs wait. Each run re-arms the timer; with no job
        waiting it sleeps until one."""
        while True:
            self._decided.clear()
            now_s = time.time()
            waiting = len(self.state.waiting())
            delay_s: float | None = None  # nothing waits: no placement could change
            if waiting:
                due_s = self.state.next_change_s(now_s - OVERDUE_GRACE_S)
                delay_s = self._redecide_s if due_s is None else \
                    min(self._redecide_s, due_s + OVERDUE_GRACE_S - now_s)
            try:
                await asyncio.wait_for(self._decided.wait(), timeout=delay_s)
            except asyncio.TimeoutError:
                log.info("deciding again without an event", waiting=waiting, after_s=round(delay_s, 3))
                await self._schedule()

    async def on_planned(self, env: events_pb2.Envelope, key: str) -> None:
        self.state.on_planned(env.job_planned)
        self._changed = True

    async def on_status(self, env: events_pb2.Envelope, key: str) -> None:
        self._note_tenant(env.job_status_changed.job)
        self.state.on_status(env.job_status_changed)
        self._changed = True

    def _note_tenant(self, job: types_pb2.Job) -> None:
        if job.state in TERMINAL:
            self.tenants.pop(job.id, None)
        elif job.id and job.tenant:
            self.tenants[job.id] = job.tenant

    async def on_availability(self, env: events_pb2.Envelope, key: str) -> None:
        event = env.gpu_availability_changed
        self.state.on_availability(event)
        self._changed = True
        # lag_s: produced to handled; with the placement's decision time it tells a late
        # wake-up from a policy that chose to keep a job waiting (docs/architecture.md).
        log.info("availability", node_id=event.node_id, free=len(event.free_gpu_indices),
                 version=event.version, cause=event.cause[:120],
                 lag_s=round(time.time() - env.produced_at.ToNanoseconds() / 1e9, 4))

    async def recover(self) -> None:
        """A restarted scheduler has lost its view, and its consumer resumes after the events
        that built it. The latest record per key of three topics holds that view again: each job's
        plans (frenzy.jobs.planned), the orchestrator's job records (its state topic) and each
        node's availability (frenzy.cluster.events)."""
        started_s = time.monotonic()

        async def latest(topic: topics.Topic, payload: str) -> list:
            state = await read_state(self.bus.bootstrap, self.bus.producer,
                                     self.bus.topic_name(topic), topic.partitions,
                                     client_options=self.bus.client_options)
            return [getattr(env, payload) for env in state.values() if env.type == payload]

        planned = await latest(topics.JOBS_PLANNED, "job_planned")
        jobs = [r.job for r in await latest(topics.ORCHESTRATOR_STATE, "job_record_state")]
        nodes = await latest(topics.CLUSTER_EVENTS, "gpu_availability_changed")
        for job in jobs:
            self._note_tenant(job)
        self.state.restore(planned, jobs, nodes)
        log.info("view recovered", planned=len(planned), jobs=len(jobs), nodes=len(nodes),
                 waiting=len(self.state.waiting()), took_s=round(time.monotonic() - started_s, 3))
        await self._schedule()

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.start()
        await self.recover()
        try:
            consumer = self.bus.consumer(GROUP, topics.JOBS_PLANNED, topics.JOBS_STATUS,
                                         topics.CLUSTER_EVENTS)
            task = asyncio.create_task(self.bus.run_consumer(consumer, GROUP, {
                "job_planned": self.on_planned, "job_status_changed": self.on_status,
                "gpu_availability_changed": self.on_availability},
                before_commit=self.schedule_if_changed,
                verify=scheduler_verifier(self.bus.settings),  # orchestrator-signed state only
                urgent=(topics.CLUSTER_EVENTS,)))
            timer = asyncio.create_task(self.redecide_loop())
            holds = asyncio.create_task(self.holds_loop())
            log.info("scheduler started", policy=self.state.policy.name,
                     compiled=native.compiled_modules())  # which build decides (native.py)
            await run_until_stopped(stop, task, timer, holds)
        finally:
            await self.bus.stop()


_RESHAPE_KINDS = {RESIZE: events_pb2.RESIZE, "migrate": events_pb2.MIGRATE,
                  PREEMPT: events_pb2.PREEMPT}


def decision_to_proto(decision: Decision | None, policy: str, now_s: float,
                      elapsed_s: float) -> types_pb2.DecisionRecord:
    """The contract's DecisionRecord (alternatives' times are seconds after the decision)."""
    record = types_pb2.DecisionRecord(policy=decision.policy if decision else policy,
                                      reason=decision.reason if decision else "",
                                      decision_time_s=elapsed_s)
    record.decided_at.FromNanoseconds(int(now_s * 1e9))
    for alt in decision.alternatives if decision else ():
        record.alternatives.add(option=option_to_proto(alt.option), estimated_start_s=alt.start_s,
                                estimated_completion_s=alt.completion_s, verdict=alt.verdict)
        if alt.verdict == "chosen" and not record.HasField("chosen"):
            record.chosen.CopyFrom(option_to_proto(alt.option))
    return record


def main() -> None:
    settings = ServiceSettings()
    run_service(lambda stop: SchedulerService(Bus("scheduler", settings), settings.policy,
                                              settings).run(stop))


def _assignments(p: Placement) -> list[types_pb2.GpuAssignment]:
    return [types_pb2.GpuAssignment(node_id=n, gpu_indices=g) for n, g in p.assignments]


def _job_placed(p: Placement, attempt: int, record: types_pb2.DecisionRecord) -> events_pb2.JobPlaced:
    """The JobPlaced of a placement, a decision's or a hold's (a fresh placement id each)."""
    return events_pb2.JobPlaced(job_id=p.job_id, option=option_to_proto(p.option), attempt=attempt,
                                placement_id=f"{p.job_id}:{time.time_ns()}",
                                assignments=_assignments(p), decision=record)
