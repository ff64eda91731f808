"""Frenzy's HAS as published (arXiv 2412.14479): memory tiers, smallest fitting tier first.

For each job, MARP's plans are sorted by (GPU count, memory per GPU). A plan maps to the
smallest GPU memory tier that fits it; the first plan for which that tier and the larger ones
have enough free GPUs is taken, starting at the smallest tier and escalating to larger-memory
tiers when a tier runs out. Nodes are chosen best-fit (`FreeIndex.best_fit`). The policy does
not look at GPU speed: that is what `has` adds.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Sequence

from frenzy.catalog.gpus import get_gpu
from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.core import ClusterView, Placement, QueuedJob, RunningJob
from frenzy_scheduler.placement import FreeIndex


@cache
def gpu_memory_bytes(gpu_type: str) -> int:
    return get_gpu(gpu_type).memory_bytes


@dataclass(frozen=True)
class _Plan:
    """One parallel plan and the options (one per GPU type) that run it, smallest tier first."""

    plan: ParallelPlan
    num_gpus: int
    peak_bytes: int
    options: tuple[PlanOption, ...]


def plans_by_tier(options: Sequence[PlanOption]) -> list[_Plan]:
    grouped: dict[tuple[ParallelPlan, int], list[PlanOption]] = {}
    for option in options:
        grouped.setdefault((option.plan, option.peak_bytes_per_gpu), []).append(option)
    plans = [_Plan(plan, plan.num_gpus, peak,
                   tuple(sorted(opts, key=lambda o: (gpu_memory_bytes(o.gpu_type), o.gpu_type))))
             for (plan, peak), opts in grouped.items()]
    return sorted(plans, key=lambda p: (p.num_gpus, p.peak_bytes))


class FrenzyPolicy:
    """Memory-tier first fit with best-fit node placement; queue in FIFO or SJF order."""

    def __init__(self, order: str = "fifo") -> None:
        if order not in ("fifo", "sjf"):
            raise ValueError(f"order: unknown {order!r}; known: fifo, sjf")
        self.order = order
        self.name = "frenzy" if order == "fifo" else "frenzy-sjf"
        # job_id -> (the options object, its plans): derived data only, so the policy stays pure.
        self._plans: dict[str, tuple[Sequence[PlanOption], list[_Plan]]] = {}

    def _sorted(self, queue: Sequence[QueuedJob]) -> list[QueuedJob]:
        if self.order == "sjf":
            return sorted(queue, key=lambda j: (min((o.duration_s for o in j.options),
                                                    default=float("inf")),
                                                j.submit_time_s, j.job_id))
        return sorted(queue, key=lambda j: (j.submit_time_s, j.job_id))

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = FreeIndex(cluster)
        placements: list[Placement] = []
        if len(self._plans) > 4 * len(queue) + 1000:
            self._plans.clear()
        for job in self._sorted(queue):
            if index.total_free() == 0:
                break
            placement = self._place(job, index)
            if placement is not None:
                index.take(placement.assignments)
                placements.append(placement)
        return placements

    def _job_plans(self, job: QueuedJob) -> list[_Plan]:
        cached = self._plans.get(job.job_id)
        if cached is None or cached[0] is not job.options:
            cached = (job.options, plans_by_tier(job.options))
            self._plans[job.job_id] = cached
        return cached[1]

    def _place(self, job: QueuedJob, index: FreeIndex) -> Placement | None:
        for plan in self._job_plans(job):
            tier_free = sum(index.free_by_type.get(o.gpu_type, 0) for o in plan.options)
            if tier_free < plan.num_gpus:
                continue
            for option in plan.options:  # smallest memory tier first, then escalate
                assignments = index.best_fit(option.gpu_type, plan.num_gpus, option.plan.tp)
                if assignments is not None:
                    return Placement(job.job_id, option, assignments)
        return None
