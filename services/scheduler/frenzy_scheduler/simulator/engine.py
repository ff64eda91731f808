"""Discrete-event simulation over the same policy code the live scheduler runs.

Events are job arrivals, run completions, node availability changes and, for a round-based
policy (Sia), rounds every `policy.round_s`. All events at one instant are applied first, and
then the policy is asked once: an event-driven policy after any change, a round-based one at
its rounds. The simulator never polls.

Every policy pays the same costs (`SimConfig`, docs/simulator.md):
* a launch overhead per start, growing with the nodes spanned;
* a restart overhead (checkpoint restore) on every resume: after a resize, migration or
  preemption (the job checkpoints first and loses nothing) or a node failure (the job loses
  the work since its last periodic checkpoint);
* prediction error: a job's true duration is MARP's predicted one times a per-job lognormal
  factor drawn from (seed, job id), so every policy meets the same errors. Policies see the
  predicted durations and a running job's true progress (the live system counts steps).

The policy's actions (placements and reshapes, `core.Placement`) are executed exactly as the
live orchestrator executes JobPlaced and ReshapeJob: every reshape's GPUs are released first,
then every action is checked by the shared `frenzy.placement_check` and takes its GPUs, so a
policy bug (a double booking, a split tp group, a wrong type) fails loudly.
"""
from __future__ import annotations

import gc
import heapq
import math
import random
import time
from dataclasses import dataclass, field, replace
from itertools import compress, count, repeat
from operator import is_
from typing import Callable, Sequence

from frenzy.domain import SCHEDULER_REDECIDE_S, PlanOption
from frenzy.placement_check import NodeFacts, placement_problem
from frenzy_scheduler.core import (MIGRATE, PLACE, PREEMPT, RESIZE, ClusterView, NodeState,
                                  Placement, Policy, QueuedJob, RunningJob)
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.simulator.workload import SimJob

_COMPLETION, _AVAILABILITY, _ARRIVAL, _ROUND, _REDECIDE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class SimConfig:
    """The costs every policy pays. The defaults are frictionless (unit tests reason about
    exact times); `frenzy simulate` and the benchmark use `SimConfig.realistic()`."""

    launch_overhead_s: float = 0.0  # per start on one node; x (1 + log2(nodes spanned))
    restart_overhead_s: float | None = 0.0  # per resume; None: each job's own (model size)
    duration_error_sigma: float = 0.0  # true duration = predicted x lognormal(0, sigma)
    checkpoint_interval_s: float = 0.0  # a node failure loses the work since; 0: from scratch
    seed: int = 0  # of the duration errors
    # Every start, the first included, pays the job's restart overhead (Sia's simulator charges
    # its checkpoint-restore time on every allocation, the first one too: sia-simulator/job.py
    # `reallocate` and `migrate` set `rescale_time`). Used to run Sia's own case
    # (bench/sia_crosscheck.py); `restarts` still counts resumes only.
    restore_on_first_start: bool = False
    # > 0: the live system's guard for every policy. A running job moved (resumed) less than
    # this long ago is shown without its menu, so no policy reshapes it, as the live scheduler
    # shows one that its orchestrator's FRENZY_RESHAPE_MIN_INTERVAL_S would refuse
    # (`LiveState._running_as_shown`). 0: no guard, as in Sia's own simulator: the default, so
    # the baselines run as their originals; `has` keeps the guard itself
    # (`HasConfig.reshape_interval_s`). bench/live_guard.py compares the two.
    reshape_guard_s: float = 0.0
    # > 0: an event-driven policy is also asked again this long after its last decision while
    # jobs wait, as the live scheduler asks it (`SchedulerService.redecide_loop`,
    # FRENZY_SCHEDULER_REDECIDE_S): what it decides may change with time alone (a running job's
    # restore ends, a queued job ages). 0: on events only.
    redecide_s: float = 0.0

    @staticmethod
    def realistic(launch_overhead_s: float = 60.0, restart_overhead_s: float | None = None,
                  duration_error_sigma: float = 0.3, seed: int = 0) -> "SimConfig":
        return SimConfig(launch_overhead_s, restart_overhead_s, duration_error_sigma,
                         checkpoint_interval_s=1800.0, seed=seed, redecide_s=SCHEDULER_REDECIDE_S)

    def launch_s(self, nodes: int) -> float:
        return self.launch_overhead_s * (1.0 + math.log2(max(1, nodes)))

    def restart_s(self, job: SimJob) -> float:
        return job.restart_overhead_s if self.restart_overhead_s is None else self.restart_overhead_s

    def error_factor(self, job_id: str) -> float:
        """The job's true / predicted duration: the same for every policy, from (seed, id)."""
        if self.duration_error_sigma <= 0:
            return 1.0
        return math.exp(random.Random(f"duration-error:{self.seed}:{job_id}")
                        .gauss(0.0, self.duration_error_sigma))


@dataclass(frozen=True)
class AvailabilityEvent:
    """A node leaving (`up=False`; its jobs resume elsewhere from their last checkpoint) or
    rejoining the cluster."""

    time_s: float
    node_id: str
    up: bool


@dataclass
class JobRecord:
    job_id: str
    submit_time_s: float
    start_time_s: float = math.nan  # latest start
    first_start_s: float = math.nan
    end_time_s: float = math.nan
    gpu_type: str = ""
    num_gpus: int = 0
    restarts: int = 0  # resumes: reshapes plus node failures
    gpu_seconds: float = 0.0  # GPUs held x time, overheads included
    work_done: float = 0.0  # fractions of the job's work done, summed over runs (lost work too)
    work_lost: float = 0.0  # done, then lost to a node failure


@dataclass
class SimResult:
    policy: str
    records: list[JobRecord]
    unschedulable: list[str]  # jobs no option of which fits the whole cluster
    stranded: list[str]  # jobs still queued when nothing else could happen (policy never ran them)
    decision_times_s: list[float]
    busy_gpu_s_by_type: dict[str, float]
    capacity_by_type: dict[str, int]
    wall_s: float = 0.0
    restarts: int = 0
    extras: dict[str, float] = field(default_factory=dict)
    segments: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, GPUs)
    segments_by_type: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    reshapes: dict[str, int] = field(default_factory=dict)  # by kind


@dataclass
class _Run:
    """A job holding GPUs: what the policy sees (`view`) and what only the engine knows."""

    view: RunningJob
    productive_from_s: float  # after the launch / restore overhead
    true_end_s: float
    fraction_at_start: float
    fraction_per_s: float  # true progress rate, in fractions of the job's work per second
    token: int  # matches the completion event of this run


def fits_empty_cluster(job: SimJob, empty: FreeIndex) -> bool:
    return any(empty.best_fit(o.gpu_type, o.num_gpus, o.plan.tp) is not None for o in job.options)


def _scaled(options: Sequence[PlanOption], factor: float) -> tuple[PlanOption, ...]:
    """The menu with every duration times `factor` (a job with that fraction of its work
    left; a running job in its measured seconds), all else kept. The constructor, not
    `replace`: half the cost, and the whole trace builds 1.9 M of them."""
    return tuple([PlanOption(o.gpu_type, o.plan, o.peak_bytes_per_gpu, o.step_time_s,
                             o.duration_s * factor, o.peak_allocated_bytes,
                             o.peak_reserved_bytes, o.memory_margin) for o in options])


# The engine's own cyclic collections (`_RunCollector`): the first this many instants into a
# run; the gap doubles after a collection that finds nothing, halves (not below this) after one
# that finds cycles.
FIRST_COLLECTION_AFTER_INSTANTS = 1000


class _RunCollector:
    """The cyclic garbage collector during a run: kept off the objects that live through it,
    and run by the engine at growing gaps instead of by allocation counts.

    What exists before the run (the trace, the jobs' menus, the policy: 2.2 M objects on the
    whole Philly trace) is frozen (`gc.freeze`), and the run's own per-job bookkeeping once
    built (`freeze_bookkeeping`); each full collection would walk them all again. Even so, on
    the whole trace under has the collector's own passes took 9.9 of 64.5 s CPU (13,633 young,
    1,239 middle and 88 full) and found nothing to collect in any of them (this module's
    cycles: none; has's: none).
    So the automatic collector is off during the run, and `tick` collects at gaps that double
    while collections find nothing: a policy that does make cycles gets them collected, at
    gaps that shrink again when they are found. Nothing is decided differently.

    Left alone when the caller has frozen objects itself (its `unfreeze` is its own) or turned
    the collector off."""

    def __init__(self) -> None:
        self.active = False
        self.gap = FIRST_COLLECTION_AFTER_INSTANTS
        self.next_at = FIRST_COLLECTION_AFTER_INSTANTS

    def __enter__(self) -> "_RunCollector":
        if not gc.isenabled() or gc.get_freeze_count():
            return self
        gc.disable()
        gc.freeze()
        self.active = True
        return self

    def freeze_bookkeeping(self) -> None:
        if self.active:
            gc.freeze()

    def tick(self, instants: int) -> None:
        """After each instant handled: collect when the gap has passed."""
        if not self.active or instants < self.next_at:
            return
        found = gc.collect()
        self.gap = self.gap * 2 if not found else max(FIRST_COLLECTION_AFTER_INSTANTS, self.gap // 2)
        self.next_at = instants + self.gap

    def __exit__(self, *exc: object) -> None:
        if self.active:
            gc.enable()
            gc.unfreeze()


def simulate(jobs: Sequence[SimJob], cluster: ClusterView, policy: Policy, *,
             availability: Sequence[AvailabilityEvent] = (),
             on_progress: Callable[[int], None] | None = None,
             config: SimConfig = SimConfig()) -> SimResult:
    """Run `policy` over `jobs` on a copy of `cluster` (every GPU of which should start free)."""
    with _RunCollector() as collector:
        return _simulate(jobs, cluster, policy, availability, on_progress, config, collector)


def _simulate(jobs: Sequence[SimJob], cluster: ClusterView, policy: Policy,
              availability: Sequence[AvailabilityEvent],
              on_progress: Callable[[int], None] | None, config: SimConfig,
              collector: _RunCollector) -> SimResult:
    started_wall = time.perf_counter()
    view = cluster.copy()
    templates = {n.node_id: NodeState(n.node_id, n.gpu_type, n.total_gpus,
                                      list(range(n.total_gpus))) for n in view.nodes.values()}
    empty = FreeIndex(ClusterView({k: NodeState(t.node_id, t.gpu_type, t.total_gpus,
                                                list(t.free_gpus)) for k, t in templates.items()}))
    capacity = view.total_by_type()
    by_id = {j.job_id: j for j in jobs}
    if len(by_id) != len(jobs):
        raise ValueError("jobs: job ids must be unique")
    round_s = float(getattr(policy, "round_s", 0.0) or 0.0)
    elastic = bool(getattr(policy, "elastic", False))
    errors = {j.job_id: config.error_factor(j.job_id) for j in jobs}
    measured: dict[str, tuple[PlanOption, ...]] = {}  # `measured_menu`'s, per job

    def measured_menu(job_id: str) -> tuple[PlanOption, ...]:
        """A running job's menu as the policies see it: MARP's durations scaled by the job's
        measured speed, as the live scheduler scales them once a job's steps are timed
        (`LiveState`: measured / predicted time of its current option, applied to every
        option). Its true durations here, where a job's prediction error is one factor for
        all its options; and what Sia's own system reads of a running job (its measured
        throughput). Built once per job: its error does not change."""
        menu = measured.get(job_id)
        if menu is None:
            menu = measured[job_id] = _scaled(by_id[job_id].options, errors[job_id])
        return menu

    guard_s = config.reshape_guard_s
    hidden: dict[str, tuple[RunningJob, RunningJob]] = {}  # `guarded`'s, per job: (run, shown)

    def guarded(now_s: float) -> list[RunningJob]:
        """The running jobs with those moved less than `guard_s` ago shown without a menu.
        One shown copy per run, so a policy that keeps state by a run's identity sees a job
        change only when its guard ends."""
        shown = []
        for job_id, run in running.items():
            if run.restarts and run.options and now_s - run.start_time_s < guard_s:
                kept = hidden.get(job_id)
                if kept is None or kept[0] is not run:
                    kept = hidden[job_id] = (run, replace(run, options=()))
                shown.append(kept[1])
            else:
                hidden.pop(job_id, None)
                shown.append(run)
        return shown

    events: list[tuple[float, int, int, str]] = []
    seq = 0

    def push(time_s: float, kind: int, key: str) -> None:
        nonlocal seq
        heapq.heappush(events, (time_s, kind, seq, key))
        seq += 1

    for job in jobs:
        push(job.submit_time_s, _ARRIVAL, job.job_id)
    node_events = {f"{i}": e for i, e in enumerate(availability)}
    for key, event in node_events.items():
        push(event.time_s, _AVAILABILITY, key)

    records = {j.job_id: JobRecord(j.job_id, j.submit_time_s) for j in jobs}
    fraction = {j.job_id: 1.0 for j in jobs}  # true work left, as of the end of its last run
    resumed = set()  # jobs whose next start restores a checkpoint
    queue: dict[str, QueuedJob] = {}
    runs: dict[str, _Run] = {}
    running: dict[str, RunningJob] = {}  # the policy's view of `runs`
    unschedulable: list[str] = []
    decisions: list[float] = []
    busy: dict[str, float] = {t: 0.0 for t in capacity}
    segments: list[tuple[float, float, int]] = []
    segments_by_type: dict[str, list[tuple[float, float, int]]] = {t: [] for t in capacity}
    reshapes = {RESIZE: 0, MIGRATE: 0, PREEMPT: 0}
    done = 0
    restarts = 0
    round_armed = False
    redecide_at_s = math.nan  # when the armed re-decision is due; a later decision re-arms it
    idle_round = False  # the last round changed nothing: do not arm another for a stuck queue
    collector.freeze_bookkeeping()  # a record and an event per job, living as long as the run

    def stop(job_id: str, now_s: float, lose_since_checkpoint: bool = False) -> _Run:
        """Release a run's GPUs and book its progress (a planned stop checkpoints first)."""
        run = runs.pop(job_id)
        del running[job_id]
        record = records[job_id]
        for node_id, gpus in run.view.assignments:
            node_type = templates[node_id].gpu_type
            busy[node_type] += len(gpus) * (now_s - run.view.start_time_s)
            segments_by_type[node_type].append((run.view.start_time_s, now_s, len(gpus)))
        record.gpu_seconds += run.view.num_gpus * (now_s - run.view.start_time_s)
        segments.append((run.view.start_time_s, now_s, run.view.num_gpus))
        view.give_back([(n, g) for n, g in run.view.assignments if n in view.nodes])
        productive_s = max(0.0, min(now_s, run.true_end_s) - run.productive_from_s)
        progress = run.fraction_per_s * productive_s
        record.work_done += progress
        if lose_since_checkpoint:
            interval = config.checkpoint_interval_s
            kept_s = math.floor(productive_s / interval) * interval if interval > 0 else 0.0
            record.work_lost += progress - run.fraction_per_s * kept_s
            progress = run.fraction_per_s * kept_s
        fraction[job_id] = max(0.0, run.fraction_at_start - progress)
        return run

    def start(job_id: str, option: PlanOption, full_work: bool,
              assignments: tuple[tuple[str, tuple[int, ...]], ...], now_s: float) -> None:
        """Launch a run: `option.duration_s` is predicted for all the job's work (`full_work`,
        a reshape picks from the full menu) or for the work left (a queued job's menu). The
        policies see the run as measured (`measured_menu`): its option and menu in its true
        seconds."""
        nonlocal restarts
        job = by_id[job_id]
        left = fraction[job_id]
        predicted_s = option.duration_s * (left if full_work else 1.0)
        true_s = predicted_s * errors[job_id]
        overhead_s = config.launch_s(len(assignments))
        record = records[job_id]
        if job_id in resumed:
            overhead_s += config.restart_s(job)
            resumed.discard(job_id)
            record.restarts += 1
            restarts += 1
        elif config.restore_on_first_start:
            overhead_s += config.restart_s(job)
        productive_from = now_s + overhead_s
        end_s = productive_from + true_s
        token = seq
        runs[job_id] = _Run(
            RunningJob(job_id, replace(option, duration_s=true_s),
                       assignments, now_s, productive_from + true_s, measured_menu(job_id),
                       left, productive_from, job.submit_time_s, job.deadline_s,
                       left / true_s if true_s > 0 else 0.0, record.restarts,
                       checkpoint_interval_s=config.checkpoint_interval_s),
            productive_from, end_s, left, left / true_s if true_s > 0 else 0.0, token)
        running[job_id] = runs[job_id].view
        if math.isnan(record.first_start_s):
            record.first_start_s = now_s
        record.start_time_s = now_s
        record.gpu_type = option.gpu_type
        record.num_gpus = option.num_gpus
        push(end_s, _COMPLETION, f"{job_id}\x00{token}")

    def requeue(job_id: str) -> None:
        job = by_id[job_id]
        left = fraction[job_id]
        options = job.options if left >= 1.0 else _scaled(job.options, left)
        queue[job_id] = QueuedJob(job_id, job.submit_time_s, options, job.deadline_s, 0, left)

    def active() -> bool:
        return bool(queue or runs)

    instants = 0
    while events:
        instants += 1
        collector.tick(instants)
        now_s = events[0][0]
        changed = False
        round_due = False
        redecide_due = False
        while events and events[0][0] == now_s:
            _, kind, _, key = heapq.heappop(events)
            if kind == _COMPLETION:
                job_id, _, token = key.partition("\x00")
                run = runs.get(job_id)
                if run is None or run.token != int(token):
                    continue  # stale: the run was reshaped or lost its node
                stop(job_id, now_s)
                fraction[job_id] = 0.0
                measured.pop(job_id, None)  # done: its menu is not shown again
                records[job_id].end_time_s = now_s
                done += 1
                changed = True
            elif kind == _AVAILABILITY:
                event = node_events[key]
                if event.up and event.node_id not in view.nodes:
                    template = templates[event.node_id]
                    view.nodes[event.node_id] = NodeState(template.node_id, template.gpu_type,
                                                          template.total_gpus,
                                                          list(range(template.total_gpus)))
                elif not event.up and event.node_id in view.nodes:
                    victims = [job_id for job_id, r in runs.items()
                               if any(n == event.node_id for n, _ in r.view.assignments)]
                    for job_id in victims:
                        stop(job_id, now_s, lose_since_checkpoint=True)
                        resumed.add(job_id)
                        requeue(job_id)
                    del view.nodes[event.node_id]
                changed = True
            elif kind == _ROUND:
                round_armed = False
                round_due = True
            elif kind == _REDECIDE:
                redecide_due = now_s == redecide_at_s  # else armed by a decision since replaced
            else:
                job = by_id[key]
                if fits_empty_cluster(job, empty):
                    queue[key] = QueuedJob(key, job.submit_time_s, job.options, job.deadline_s)
                    changed = True
                else:
                    unschedulable.append(key)
                    done += 1
        if round_s > 0:
            if not round_armed and active() and (runs or changed or not idle_round):
                # the next round boundary (this instant's round, if one just ran, is spent)
                next_s = math.floor(now_s / round_s) * round_s + (round_s if round_due or
                                                                  now_s % round_s else 0.0)
                push(next_s, _ROUND, "")
                round_armed = True
            decide = round_due and active()
        else:
            decide = (changed and (bool(queue) or (elastic and bool(runs)))) or \
                (redecide_due and bool(queue))
        if not decide:
            if on_progress is not None:
                on_progress(done)
            continue
        shown = list(running.values()) if guard_s <= 0 else guarded(now_s)
        tick = time.perf_counter()
        actions = policy.schedule(list(queue.values()), view, now_s, shown)
        decisions.append(time.perf_counter() - tick)
        idle_round = not actions
        for action in actions if guard_s > 0 else ():
            if action.kind != PLACE and action.job_id in hidden and \
                    hidden[action.job_id][0] is running.get(action.job_id):
                raise ValueError(f"policy reshaped {action.job_id!r}, which the guard hides")
        _execute(actions, now_s, queue, runs, view, templates, by_id, stop, start, requeue,
                 resumed, reshapes, measured_menu)
        # Jobs wait: ask again then, unless nothing can change any more (nothing runs and this
        # answer did nothing: a stuck queue, where the live timer would fire for ever)
        if config.redecide_s > 0 and round_s <= 0 and queue and (runs or actions):
            redecide_at_s = now_s + config.redecide_s
            push(redecide_at_s, _REDECIDE, "")
        if on_progress is not None:
            on_progress(done)

    return SimResult(getattr(policy, "name", type(policy).__name__), list(records.values()),
                     unschedulable, sorted(queue), decisions, busy, capacity,
                     time.perf_counter() - started_wall, restarts, segments=segments,
                     segments_by_type=segments_by_type,
                     reshapes=reshapes)


def _execute(actions: Sequence[Placement], now_s: float, queue: dict[str, QueuedJob],
             runs: dict[str, _Run], view: ClusterView, templates: dict[str, NodeState],
             by_id: dict[str, SimJob], stop: Callable, start: Callable, requeue: Callable,
             resumed: set[str], reshapes: dict[str, int],
             measured_menu: Callable[[str], tuple[PlanOption, ...]]) -> None:
    """Run a policy's answer as the orchestrator would: releases first, then checked takes. A
    reshape picks from the running job's measured menu; it is run as the MARP option of the
    same position in the job's menu (`start` applies the job's error itself)."""
    seen: set[str] = set()
    for action in actions:
        if action.job_id in seen:
            raise ValueError(f"policy acted twice on {action.job_id!r} in one answer")
        seen.add(action.job_id)
        if action.kind == PLACE:
            if action.job_id not in queue:
                raise ValueError(f"policy placed {action.job_id!r}, which is not queued")
        elif action.kind in (RESIZE, MIGRATE, PREEMPT):
            if action.job_id not in runs:
                raise ValueError(f"policy reshaped {action.job_id!r}, which is not running")
        else:
            raise ValueError(f"policy returned an unknown action kind {action.kind!r}")
    for action in actions:  # releases first: a placement may use what a reshape frees
        if action.kind != PLACE:
            stop(action.job_id, now_s)
            resumed.add(action.job_id)
            reshapes[action.kind] += 1
            if action.kind == PREEMPT:
                requeue(action.job_id)
    for action in actions:
        if action.kind == PREEMPT:
            continue
        job = by_id[action.job_id]
        menu = queue[action.job_id].options if action.kind == PLACE else \
            measured_menu(action.job_id)
        option = action.option
        # By identity first, in C (the policies hand back the menu's own objects): `in` calls
        # the dataclass's `__eq__` on every option ahead of it, 1 % of the whole trace
        if action.kind == PLACE:
            if not any(map(is_, menu, repeat(option))) and option not in menu and \
                    not any(o.plan == option.plan for o in menu):
                raise ValueError(f"policy chose for {action.job_id!r} an option it does not have")
        else:  # run as MARP's option at the same place in the menu: `start` applies the error
            at = next(compress(count(), map(is_, menu, repeat(option))), None)
            if at is None:
                at = next((i for i, o in enumerate(menu) if o == option or (
                    o.gpu_type == option.gpu_type and o.plan == option.plan)), None)
            if at is None:
                raise ValueError(f"policy chose for {action.job_id!r} an option it does not have")
            option = job.options[at]
        nodes = {node_id: NodeFacts(node.gpu_type, set(node.free_gpus))
                 for node_id, _ in action.assignments
                 if (node := view.nodes.get(node_id)) is not None}
        problem = placement_problem(option.gpu_type, option.num_gpus, option.plan.tp,
                                    action.assignments, nodes)
        if problem:
            raise ValueError(f"{action.job_id}: {problem}")
        view.take(action.assignments)
        if action.kind == PLACE:
            del queue[action.job_id]
        start(action.job_id, option, action.kind != PLACE, action.assignments, now_s)
