"""Summary metrics of a simulation run: the JSON schema documented in docs/simulator.md."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from frenzy.domain import PlanOption
from frenzy_scheduler.simulator.engine import SimResult
from frenzy_scheduler.simulator.workload import SimJob


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def summarize(result: SimResult) -> dict[str, object]:
    finished = [r for r in result.records if not math.isnan(r.end_time_s)]
    jct = [r.end_time_s - r.submit_time_s for r in finished]
    queued = [r.first_start_s - r.submit_time_s for r in finished]
    if finished:
        first_submit = min(r.submit_time_s for r in result.records)
        makespan = max(r.end_time_s for r in finished) - first_submit
    else:
        makespan = 0.0
    capacity = sum(result.capacity_by_type.values())
    busy = sum(result.busy_gpu_s_by_type.values())
    # Load while jobs still arrive: the tail after the last arrival is one long job draining.
    arrival_end = max((r.submit_time_s for r in result.records), default=0.0)
    arrival_start = min((r.submit_time_s for r in result.records), default=0.0)
    window_s = arrival_end - arrival_start
    busy_window = sum(r.num_gpus * max(0.0, min(r.end_time_s, arrival_end) - r.start_time_s)
                      for r in finished)
    decisions = result.decision_times_s
    return {
        "policy": result.policy,
        "jobs": len(result.records),
        "completed": len(finished),
        "unschedulable": len(result.unschedulable),
        "stranded": len(result.stranded),
        "avg_jct_s": float(np.mean(jct)) if jct else 0.0,
        "p50_jct_s": _percentile(jct, 50),
        "p99_jct_s": _percentile(jct, 99),
        "avg_queue_s": float(np.mean(queued)) if queued else 0.0,
        "p99_queue_s": _percentile(queued, 99),
        "makespan_s": makespan,
        "utilization": busy / (capacity * makespan) if capacity and makespan else 0.0,
        "utilization_arrivals": busy_window / (capacity * window_s) if capacity and window_s else 0.0,
        "utilization_by_type": {
            t: (result.busy_gpu_s_by_type.get(t, 0.0) / (n * makespan) if n and makespan else 0.0)
            for t, n in sorted(result.capacity_by_type.items())},
        "restarts": result.restarts,
        "decisions": len(decisions),
        "decision_p50_s": _percentile(decisions, 50),
        "decision_p99_s": _percentile(decisions, 99),
        "decision_max_s": max(decisions, default=0.0),
        "decision_total_s": float(sum(decisions)),
        "sim_wall_s": result.wall_s,
    }


def job_demand(job: SimJob, capacity_by_type: dict[str, int]) -> tuple[float, float]:
    """(GPU-seconds, duration) a job costs on a GPU drawn at random from the cluster: the
    capacity-weighted mean, over the types it can run on, of its cheapest option there."""
    cheapest: dict[str, PlanOption] = {}
    for option in job.options:
        if option.gpu_type in capacity_by_type:
            best = cheapest.get(option.gpu_type)
            if best is None or option.gpu_seconds < best.gpu_seconds:
                cheapest[option.gpu_type] = option
    if not cheapest:
        return 0.0, 0.0
    weight = sum(capacity_by_type[t] for t in cheapest)
    gpu_s = sum(capacity_by_type[t] * o.gpu_seconds for t, o in cheapest.items()) / weight
    duration = sum(capacity_by_type[t] * o.duration_s for t, o in cheapest.items()) / weight
    return gpu_s, duration


def offered_load(jobs: Sequence[SimJob], capacity_by_type: dict[str, int]) -> float:
    """Demand over capacity while jobs arrive.

    Each job counts the part of its work that would fall inside the arrival window if it
    started on arrival: Philly's durations are heavy-tailed, and one 50-day job must not make
    a 500-job window look busy when most of its work happens after the last arrival.
    """
    if len(jobs) < 2:
        return 0.0
    first = min(j.submit_time_s for j in jobs)
    end = max(j.submit_time_s for j in jobs)
    gpus = sum(capacity_by_type.values())
    if end <= first or gpus == 0:
        return math.inf
    work = 0.0
    for job in jobs:
        gpu_s, duration = job_demand(job, capacity_by_type)
        if duration > 0:
            work += gpu_s * min(1.0, (end - job.submit_time_s) / duration)
    return work / (gpus * (end - first))


def scale_arrivals(jobs: Sequence[SimJob], capacity_by_type: dict[str, int],
                   target_load: float) -> list[SimJob]:
    """Stretch or squeeze inter-arrival times (one factor) so the offered load is `target_load`.

    Offered load falls monotonically as arrivals stretch, so the factor is found by bisection.
    """
    if not jobs or target_load <= 0 or offered_load(jobs, capacity_by_type) in (0.0, math.inf):
        return list(jobs)
    base = min(j.submit_time_s for j in jobs)

    def stretched(factor: float) -> list[SimJob]:
        out = []
        for job in jobs:
            submit = base + (job.submit_time_s - base) * factor
            deadline = submit + (job.deadline_s - job.submit_time_s) if job.deadline_s else 0.0
            out.append(replace(job, submit_time_s=submit, deadline_s=deadline))
        return out

    low, high = -30.0, 30.0  # log2 of the factor
    for _ in range(60):
        mid = (low + high) / 2
        if offered_load(stretched(2.0 ** mid), capacity_by_type) > target_load:
            low = mid
        else:
            high = mid
    return stretched(2.0 ** ((low + high) / 2))
