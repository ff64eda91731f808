"""Discrete-event simulation over the same policy code the live scheduler runs.

Events are job arrivals, job completions and node availability changes. All events at one
instant are applied first (completions, then availability, then arrivals), and then the
policy is asked once: the simulator never polls. Each placement is validated (the job is
queued, GPUs are free and of the option's type), so a policy bug fails loudly.
"""
from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from frenzy_scheduler.core import ClusterView, NodeState, Placement, Policy, QueuedJob, RunningJob
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.simulator.workload import SimJob

_COMPLETION, _AVAILABILITY, _ARRIVAL = 0, 1, 2


@dataclass(frozen=True)
class AvailabilityEvent:
    """A node leaving (`up=False`; its jobs restart from scratch) or rejoining the cluster."""

    time_s: float
    node_id: str
    up: bool


@dataclass
class JobRecord:
    job_id: str
    submit_time_s: float
    start_time_s: float = math.nan  # latest start (a restart after a node failure resets it)
    first_start_s: float = math.nan
    end_time_s: float = math.nan
    gpu_type: str = ""
    num_gpus: int = 0
    restarts: int = 0


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


def fits_empty_cluster(job: SimJob, empty: FreeIndex) -> bool:
    return any(empty.best_fit(o.gpu_type, o.num_gpus, o.plan.tp) is not None for o in job.options)


def simulate(jobs: Sequence[SimJob], cluster: ClusterView, policy: Policy, *,
             availability: Sequence[AvailabilityEvent] = (),
             on_progress: Callable[[int], None] | None = None) -> SimResult:
    """Run `policy` over `jobs` on a copy of `cluster` (every GPU of which should start free)."""
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
    queue: dict[str, QueuedJob] = {}
    running: dict[str, RunningJob] = {}
    attempts: dict[str, int] = {}
    unschedulable: list[str] = []
    decisions: list[float] = []
    busy: dict[str, float] = {t: 0.0 for t in capacity}
    done = 0
    restarts = 0

    def stop(job_id: str, now_s: float) -> RunningJob:
        run = running.pop(job_id)
        busy[run.option.gpu_type] += run.num_gpus * (now_s - run.start_time_s)
        view.give_back([(n, g) for n, g in run.assignments if n in view.nodes])
        return run

    while events:
        now_s = events[0][0]
        changed = False
        while events and events[0][0] == now_s:
            _, kind, _, key = heapq.heappop(events)
            if kind == _COMPLETION:
                run = running.get(key)
                if run is None or run.expected_end_s != now_s:
                    continue  # stale: the job was restarted after a node failure
                stop(key, now_s)
                records[key].end_time_s = now_s
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
                    victims = [r.job_id for r in running.values()
                               if any(n == event.node_id for n, _ in r.assignments)]
                    del view.nodes[event.node_id]
                    for job_id in victims:  # restart from scratch: no checkpoint model
                        stop(job_id, now_s)
                        attempts[job_id] = attempts.get(job_id, 0) + 1
                        records[job_id].restarts += 1
                        restarts += 1
                        job = by_id[job_id]
                        queue[job_id] = QueuedJob(job_id, job.submit_time_s, job.options,
                                                  job.deadline_s, attempts[job_id])
                changed = True
            else:
                job = by_id[key]
                if fits_empty_cluster(job, empty):
                    queue[key] = QueuedJob(key, job.submit_time_s, job.options, job.deadline_s)
                    changed = True
                else:
                    unschedulable.append(key)
                    done += 1
        if not changed or not queue:
            if on_progress is not None:
                on_progress(done)
            continue
        ordered = list(queue.values())
        tick = time.perf_counter()
        placements = policy.schedule(ordered, view, now_s, list(running.values()))
        decisions.append(time.perf_counter() - tick)
        for placement in placements:
            _bind(placement, queue, view)
            job_id = placement.job_id
            del queue[job_id]
            end_s = now_s + placement.option.duration_s
            running[job_id] = RunningJob(job_id, placement.option, placement.assignments,
                                         now_s, end_s)
            record = records[job_id]
            record.start_time_s = now_s
            if math.isnan(record.first_start_s):
                record.first_start_s = now_s
            record.gpu_type = placement.option.gpu_type
            record.num_gpus = placement.option.num_gpus
            push(end_s, _COMPLETION, job_id)
        if on_progress is not None:
            on_progress(done)

    return SimResult(getattr(policy, "name", type(policy).__name__), list(records.values()),
                     unschedulable, sorted(queue), decisions, busy, capacity,
                     time.perf_counter() - started_wall, restarts)


def _bind(placement: Placement, queue: dict[str, QueuedJob], view: ClusterView) -> None:
    """Validate a placement against the live view, then take its GPUs."""
    job = queue.get(placement.job_id)
    if job is None:
        raise ValueError(f"policy placed {placement.job_id!r}, which is not queued")
    if placement.option not in job.options:
        raise ValueError(f"policy placed {placement.job_id!r} with an option it does not have")
    count = 0
    for node_id, gpus in placement.assignments:
        node = view.nodes.get(node_id)
        if node is None or node.gpu_type != placement.option.gpu_type:
            raise ValueError(f"{placement.job_id}: node {node_id} is not a "
                             f"{placement.option.gpu_type} node")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"{placement.job_id}: GPU listed twice on {node_id}")
        count += len(gpus)
    if count != placement.option.num_gpus:
        raise ValueError(f"{placement.job_id}: {count} GPUs for a {placement.option.num_gpus}-GPU plan")
    view.take(placement.assignments)  # raises on a double booking
