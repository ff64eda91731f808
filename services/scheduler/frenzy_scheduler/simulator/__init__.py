"""Trace-driven discrete-event simulator over the scheduling policies.

Typical use::

    groups = load_cluster_file("deploy/clusters/frenzy-288.yaml")
    jobs = prepare_jobs("philly.csv", groups, count=500, load=0.85, seed=0)
    metrics = run_policy("has", jobs, groups)
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from frenzy.clusterfile import NodeGroup
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.simulator.engine import AvailabilityEvent, SimConfig, SimResult, simulate
from frenzy_scheduler.simulator.metrics import offered_load, scale_arrivals, summarize
from frenzy_scheduler.simulator.trace import TraceJob, load_trace, select_window
from frenzy_scheduler.simulator.workload import DEFAULT_REFERENCE_GPU, SimJob, WorkloadMapper

__all__ = ["AvailabilityEvent", "SimConfig", "SimJob", "SimResult", "TraceJob", "WorkloadMapper",
           "load_trace", "offered_load", "prepare_jobs", "run_policy", "scale_arrivals",
           "select_window", "simulate", "summarize"]


def prepare_jobs(trace: str | Path | Sequence[TraceJob], groups: Sequence[NodeGroup], *,
                 start_s: float = 0.0, count: int = 0, load: float = 0.0, seed: int = 0,
                 reference_gpu: str = DEFAULT_REFERENCE_GPU) -> list[SimJob]:
    """Trace window -> LLM jobs with MARP options for this cluster, optionally load-scaled."""
    trace_jobs = load_trace(trace) if isinstance(trace, (str, Path)) else list(trace)
    window = select_window(trace_jobs, start_s, count)
    node_sizes: dict[str, int] = {}
    for group in groups:
        node_sizes[group.gpu_type] = max(node_sizes.get(group.gpu_type, 0), group.gpus_per_node)
    mapper = WorkloadMapper([g.gpu_type for g in groups], seed, reference_gpu, node_sizes)
    jobs = mapper.map_jobs(window)
    if load > 0:
        capacity = build_cluster(list(groups)).total_by_type()
        jobs = scale_arrivals(jobs, capacity, load)
    return jobs


def run_policy(policy_name: str, jobs: Sequence[SimJob], groups: Sequence[NodeGroup], *,
               availability: Sequence[AvailabilityEvent] = (),
               on_progress: Callable[[int], None] | None = None,
               config: SimConfig = SimConfig()) -> dict[str, object]:
    """Simulate one policy on a fresh cluster and return the summary metrics."""
    result = simulate(jobs, build_cluster(list(groups)), get_policy(policy_name),
                      availability=availability, on_progress=on_progress, config=config)
    return summarize(result)
