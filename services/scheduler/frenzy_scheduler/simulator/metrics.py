"""Summary metrics of a simulation run: the JSON schema documented in docs/simulator.md."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from frenzy_scheduler.simulator.engine import SimResult
from frenzy_scheduler.simulator.workload import SimJob

CDF_STEPS = 100  # jct_quantiles_s and queue_quantiles_s hold CDF_STEPS + 1 percentiles


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


# The share of jobs whose mean JCT is the tail figure beside p99 (`slowest_mean`)
SLOWEST_FRACTION = 0.01


def slowest_mean(values: Sequence[float], fraction: float = SLOWEST_FRACTION) -> float:
    """The mean of the largest `fraction` of the values, at least one: the tail beside p99.

    Why both: over a 500-job window p99 is one order statistic (about the 6th-largest JCT),
    so one job moving decides it; the mean of the slowest 1 % (expected shortfall, CVaR)
    weighs the whole tail (0 for no values)."""
    if not values:
        return 0.0
    count = max(1, int(len(values) * fraction))
    return float(np.mean(sorted(values)[-count:]))


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
    busy_window = sum(gpus * max(0.0, min(end, arrival_end) - start)
                      for start, end, gpus in result.segments)
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
        "slowest_1pct_jct_s": slowest_mean(jct),
        "avg_queue_s": float(np.mean(queued)) if queued else 0.0,
        "p99_queue_s": _percentile(queued, 99),
        "makespan_s": makespan,
        "utilization": busy / (capacity * makespan) if capacity and makespan else 0.0,
        "utilization_arrivals": busy_window / (capacity * window_s) if capacity and window_s else 0.0,
        "utilization_by_type": {
            t: (result.busy_gpu_s_by_type.get(t, 0.0) / (n * makespan) if n and makespan else 0.0)
            for t, n in sorted(result.capacity_by_type.items())},
        "utilization_over_time": utilization_over_time(result.segments, capacity,
                                                       arrival_start, arrival_start + makespan),
        "utilization_over_time_by_type": {
            t: utilization_over_time(result.segments_by_type.get(t, []), n, arrival_start,
                                     arrival_start + makespan)
            for t, n in sorted(result.capacity_by_type.items())},
        "jct_quantiles_s": quantiles(jct),
        "queue_quantiles_s": quantiles(queued),
        "gpu_hours": busy / 3600.0,
        "gpu_hours_by_type": {t: result.busy_gpu_s_by_type.get(t, 0.0) / 3600.0
                              for t in sorted(result.capacity_by_type)},
        "restarts": result.restarts,
        "reshapes": dict(result.reshapes),
        "decisions": len(decisions),
        "decision_p50_s": _percentile(decisions, 50),
        "decision_p99_s": _percentile(decisions, 99),
        "decision_max_s": max(decisions, default=0.0),
        "decision_total_s": float(sum(decisions)),
        "sim_wall_s": result.wall_s,
    }


def quantiles(values: Sequence[float], steps: int = CDF_STEPS) -> list[float]:
    """The 0th, 1/steps-th, ..., 100th percentiles: a CDF of any number of jobs in a fixed,
    small size (the plots draw JCT and queueing-delay CDFs from it)."""
    if not len(values):
        return []
    return [round(float(v), 1) for v in np.percentile(values, np.linspace(0, 100, steps + 1))]


def utilization_over_time(segments: Sequence[tuple[float, float, int]], gpus: int,
                          start_s: float, end_s: float, buckets: int = 48) -> list[list[float]]:
    """[bucket start s, busy GPUs / all GPUs] over `buckets` equal slices of [start, end]: a
    policy that buys JCT with idle or wasted GPUs shows here."""
    if gpus <= 0 or end_s <= start_s:
        return []
    width = (end_s - start_s) / buckets
    busy = [0.0] * buckets
    for begin, end, count in segments:
        first = max(0, int((begin - start_s) // width))
        last = min(buckets - 1, int((end - start_s) // width))
        for b in range(first, last + 1):
            lo, hi = start_s + b * width, start_s + (b + 1) * width
            busy[b] += count * max(0.0, min(end, hi) - max(begin, lo))
    return [[round(start_s + b * width, 1), round(busy[b] / (gpus * width), 4)]
            for b in range(buckets)]


def offered_load(jobs: Sequence[SimJob], capacity_by_type: dict[str, int]) -> float:
    """Work over capacity while jobs arrive: the trace's GPU-hours on the reference type over
    (the cluster's GPUs x the arrival window), as the issue defines it. Faster types in the
    cluster make the real load lower than this figure; long-tailed jobs make it higher while
    they run past the window; both are the same for every policy."""
    if len(jobs) < 2:
        return 0.0
    first = min(j.submit_time_s for j in jobs)
    end = max(j.submit_time_s for j in jobs)
    gpus = sum(capacity_by_type.values())
    if end <= first or gpus == 0:
        return math.inf
    return sum(j.reference_gpu_seconds for j in jobs) / (gpus * (end - first))


def scale_arrivals(jobs: Sequence[SimJob], capacity_by_type: dict[str, int],
                   target_load: float) -> list[SimJob]:
    """Stretch or squeeze inter-arrival times (one factor) so the offered load is `target_load`
    (the load is work / span, so the factor is current load / target)."""
    current = offered_load(jobs, capacity_by_type)
    if not jobs or target_load <= 0 or current in (0.0, math.inf):
        return list(jobs)
    factor = current / target_load
    base = min(j.submit_time_s for j in jobs)
    out = []
    for job in jobs:
        submit = base + (job.submit_time_s - base) * factor
        deadline = submit + (job.deadline_s - job.submit_time_s) if job.deadline_s else 0.0
        out.append(replace(job, submit_time_s=submit, deadline_s=deadline))
    return out
