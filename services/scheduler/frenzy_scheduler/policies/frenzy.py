"""Frenzy's HAS (arXiv 2412.14479), two readings: `frenzy` as the public code behaves, and
`frenzy-narrow` (fewest GPUs first, this project's earlier reading of the paper).

`frenzy` follows `scheduler_Frenzy.py` of ISCS-ZJU/Frenzy, `try_allocate_job_to_cluster`
(mapped point by point in docs/has.md):

* MARP's plans, sorted by (GPU count, memory per GPU), are all visited with no `break`: the
  last plan whose memory tier has the GPUs wins, which is the widest one that fits now.
* A plan's tier is a memory *size* (`gpu_ceil`: the smallest size in the cluster that holds
  its memory per GPU), and `free_gpu_ge[size]` counts free GPUs of that size or larger, so
  types with equal memory (A800, H800, A100-80GB) are one tier.
* Nodes are walked in (idle GPUs ascending, FLOPs descending) order (`sort_node_policy` 4),
  strictly within the tier first (`gpu_size_matching`), then escalating to larger sizes: a
  node that covers the rest alone (the first in that order, so the one with the fewest idle
  GPUs), else the last node of the order (most idle GPUs) is taken whole and the walk repeats
  before it. A job may so span tiers; it is then timed at its slowest node's FLOPs.

Differences, named: a node contributes whole tensor-parallel groups (Frenzy's instances are
single GPUs, which would split a tp group across nodes; our launcher refuses that), and a
mixed-tier job is named by its slowest type, which must also be its smallest-memory type
(else the placement is dropped: the shared placement check could not prove it fits).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Sequence

from frenzy.catalog.gpus import get_gpu
from frenzy.domain import ParallelPlan, PlanOption
from frenzy.placement_check import covers
from frenzy_predictor.plans import usable_bytes
from frenzy_scheduler.core import (ClusterView, Decision, Placement, QueuedJob, RunningJob,
                                  option_alternatives)
from frenzy_scheduler.placement import FreeIndex


@cache
def gpu_memory_bytes(gpu_type: str) -> int:
    return get_gpu(gpu_type).memory_bytes


@cache
def gpu_flops(gpu_type: str) -> float:
    return get_gpu(gpu_type).peak_tflops_16bit


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


class _PlanCache:
    """job_id -> (the options object, its plans): derived data only, so policies stay pure."""

    def __init__(self) -> None:
        self._plans: dict[str, tuple[Sequence[PlanOption], list[_Plan]]] = {}

    def get(self, job: QueuedJob, queue_len: int) -> list[_Plan]:
        if len(self._plans) > 4 * queue_len + 1000:
            self._plans.clear()
        cached = self._plans.get(job.job_id)
        if cached is None or cached[0] is not job.options:
            cached = (job.options, plans_by_tier(job.options))
            self._plans[job.job_id] = cached
        return cached[1]


class FrenzyPolicy:
    """The public code's loop: the widest plan that fits its memory tier, its node walk."""

    name = "frenzy"
    round_s = 0.0

    def __init__(self) -> None:
        self._plans = _PlanCache()

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        free = {node_id: list(node.free_gpus) for node_id, node in cluster.nodes.items()}
        types = {node_id: node.gpu_type for node_id, node in cluster.nodes.items()}
        sizes = sorted({gpu_memory_bytes(t) for t in types.values()})
        placements: list[Placement] = []
        for job in sorted(queue, key=lambda j: (j.submit_time_s, j.job_id)):  # FIFO (policy 8)
            if not any(free.values()):
                break  # -1: the cluster is full, stop picking jobs
            placement = self._place(job, free, types, sizes, len(queue))
            if placement is None:
                continue  # 0: try the next job
            for node_id, gpus in placement.assignments:
                free[node_id] = [g for g in free[node_id] if g not in gpus]
            placements.append(placement)
        return placements

    def _place(self, job: QueuedJob, free: dict[str, list[int]], types: dict[str, str],
               sizes: list[int], queue_len: int) -> Placement | None:
        free_ge = {size: sum(len(g) for n, g in free.items() if gpu_memory_bytes(types[n]) >= size)
                   for size in sizes}
        chosen: tuple[_Plan, int] | None = None
        for plan in self._plans.get(job, queue_len):  # no break: the last plan that fits wins
            size = next((s for s in sizes if plan.peak_bytes <= usable_of(s)), None)
            if size is not None and plan.num_gpus <= free_ge[size]:
                chosen = (plan, size)
        if chosen is None:
            return None
        plan, size = chosen
        assignments = node_walk(free, types, sizes, size, plan.num_gpus, max(1, plan.plan.tp))
        if assignments is None:
            return None
        option = timed_option(plan, {types[n] for n, _ in assignments})
        if option is None:
            return None
        return Placement(job.job_id, option, assignments, decision=Decision(
            "frenzy", f"widest plan whose {size / 2**30:.0f} GiB tier has "
                      f"{plan.num_gpus} free GPUs (public code's loop)",
            option_alternatives(job.options, option)))


def usable_of(size_bytes: int) -> float:
    """Memory a plan may use on a GPU of this size (MARP's fit margin, one place for it)."""
    return usable_bytes(replace(get_gpu("T4"), memory_bytes=size_bytes))


def node_walk(free: dict[str, list[int]], types: dict[str, str], sizes: list[int], tier: int,
              count: int, tp: int) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """`try_allocate_job_to_cluster` PART2: nodes by (idle ascending, FLOPs descending); in the
    tier, the first node that covers the rest, else the last node (most idle) whole; repeat
    before it; escalate to the next size when the tier has no node left."""
    order = sorted(free, key=lambda n: (len(free[n]), -gpu_flops(types[n]), n))
    size_index = sizes.index(tier)
    match = sizes[size_index]
    last_use = len(order)
    chosen: dict[str, int] = {}
    assigned = 0
    while assigned < count:
        enough = False
        max_id = -1
        for i, node_id in enumerate(order):
            if i >= last_use:
                break
            if gpu_memory_bytes(types[node_id]) != match or node_id in chosen:
                continue
            max_id = i
            offer = len(free[node_id]) // tp * tp
            if assigned + offer >= count:
                chosen[node_id] = count - assigned
                assigned = count
                enough = True
                break
        if enough:
            break
        if max_id >= 0:
            node_id = order[max_id]
            last_use = max_id
            offer = len(free[node_id]) // tp * tp
            if offer > 0:
                chosen[node_id] = offer
                assigned += offer
        elif size_index < len(sizes) - 1:
            size_index += 1
            match = sizes[size_index]
            last_use = len(order)
        else:
            return None
    return tuple((n, tuple(free[n][:k])) for n, k in chosen.items())


def timed_option(plan: _Plan, node_types: set[str]) -> PlanOption | None:
    """The option a placement runs: the plan on its slowest node's type, timed there (the
    job's own estimate on that type if MARP has one, else scaled by peak FLOPs)."""
    slowest = min(node_types, key=lambda t: (gpu_flops(t), gpu_memory_bytes(t), t))
    if any(t != slowest and not covers(t, slowest) for t in node_types):
        return None
    own = next((o for o in plan.options if o.gpu_type == slowest), None)
    if own is not None:
        return own
    ref = max(plan.options, key=lambda o: gpu_flops(o.gpu_type))
    scale = gpu_flops(ref.gpu_type) / gpu_flops(slowest)
    return replace(ref, gpu_type=slowest, step_time_s=ref.step_time_s * scale,
                   duration_s=ref.duration_s * scale)


class FrenzyNarrowPolicy:
    """`frenzy-narrow`: the fewest-GPU plan whose smallest fitting tier (or a larger one) has
    the GPUs; smallest tier first, escalating; best-fit nodes. Our earlier reading of the
    paper, kept as a named variant."""

    name = "frenzy-narrow"
    round_s = 0.0

    def __init__(self) -> None:
        self._plans = _PlanCache()

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = FreeIndex(cluster)
        placements: list[Placement] = []
        for job in sorted(queue, key=lambda j: (j.submit_time_s, j.job_id)):
            if index.total_free() == 0:
                break
            placement = self._place(job, index, len(queue))
            if placement is not None:
                index.take(placement.assignments)
                placements.append(placement)
        return placements

    def _place(self, job: QueuedJob, index: FreeIndex, queue_len: int) -> Placement | None:
        for plan in self._plans.get(job, queue_len):
            tier_free = sum(index.free_by_type.get(o.gpu_type, 0) for o in plan.options)
            if tier_free < plan.num_gpus:
                continue
            for option in plan.options:  # smallest memory tier first, then escalate
                assignments = index.best_fit(option.gpu_type, plan.num_gpus, option.plan.tp)
                if assignments is not None:
                    return Placement(job.job_id, option, assignments, decision=Decision(
                        "frenzy-narrow", "fewest-GPU plan, smallest memory tier with room",
                        option_alternatives(job.options, option)))
        return None
