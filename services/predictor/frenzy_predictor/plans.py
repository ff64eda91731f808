"""Enumerate feasible (GPU type, GPU count, parallel plan) options for a job and rank them.

For every allowed GPU type we search plans (tp, pp, dp, zero, micro-batch, recompute), keep the
fastest plan that fits for each GPU count, and return each type's Pareto front over estimated
job duration and GPU-seconds. The search is pruned so that one job against ten GPU types takes
milliseconds (docs/marp-plans.md, "Search"):

* memory does not depend on the GPU type: each plan is estimated once per job (`MemoryTable`),
  and the estimate's terms once per value of the plan fields they read (its memo);
* tp, pp, dp, cp and micro-batches are powers of two; tp stays inside a node; pipelines use the
  node's widest tp (NVLink) or none (PCIe); context parallelism (cp > 1) only for long
  sequences on stacks that have it (`context_parallel_sizes`); at most 512 GPUs;
* branch and bound per GPU count: layouts (tp, pp, dp) in order of a compute-only lower bound,
  then (ZeRO stage, recompute) in order of their memory-blind step time; memory is estimated
  only for candidates that could still beat the incumbent (the cost model is ~5x cheaper);
* the largest fitting micro-batch is a binary search (memory grows with it), started from what
  already fitted with fewer replicas, less ZeRO or less recompute (memory only shrinks there);
* each type starts from the winners of the types searched before it (good early incumbents);
* GPU counts stop doubling after two doublings without a speed-up.

Only plans the job's launcher runs are searched (`frenzy.runnable.runnable_plan`, the check the
reference trainer applies too): a plan offered never fails at launch for its shape.
"""
from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Mapping, Sequence

from frenzy.catalog.gpus import GpuType
from frenzy.catalog.models import ModelArch
from frenzy.domain import (OPTIMIZER_MOMENT_BYTES, RECOMPUTES, Constraints, ParallelPlan, PlanOption,
                           TrainingSpec)
from frenzy.runnable import runnable_plan
from frenzy_predictor.cost import CostModel
from frenzy_predictor.memory import MemoryEstimate, estimate_memory, recipe_profile

FIT_MARGIN = 0.95  # use at most this fraction of a GPU's memory (allocator fragmentation)
MAX_GPUS = 512  # GPU count cap per job
MAX_TP = 8  # tensor parallel beyond one 8-GPU node is never worth its all-reduces
MAX_PP = 16
MAX_TOKENS_PER_MICRO_BATCH = 16384  # GEMMs saturate long before; bigger only costs memory
MAX_OPTIONS_PER_TYPE = 8
EFFICIENT_SCALING = 0.8  # options within 1/0.8 of a type's cheapest GPU-seconds rank first
DP_STALL_LIMIT = 2  # stop doubling dp after this many doublings without a speed-up
# Context parallelism is tried for sequences of at least this many tokens, up to MAX_CP ranks,
# each rank keeping at least CP_MIN_TOKENS_PER_RANK: below that, activations rarely need it
# and its K/V ring hides behind too little attention (search-space bounds, not fitted).
CP_MIN_SEQ_LEN = 8192
CP_MIN_TOKENS_PER_RANK = 2048
MAX_CP = 16


def usable_bytes(gpu: GpuType, fit_margin: float = FIT_MARGIN) -> float:
    """Memory a plan may use on one GPU of this type."""
    return gpu.memory_bytes * fit_margin


def make_plan(tp: int, pp: int, dp: int, zero: int, micro_batch: int, recompute: str,
              ep: int = 1, cp: int = 1) -> ParallelPlan:
    """A plan as MARP emits it: sequence parallelism whenever tp > 1 (same traffic, less memory)."""
    return ParallelPlan(dp=dp, tp=tp, pp=pp, zero=zero, micro_batch=micro_batch,
                        recompute=recompute, sequence_parallel=tp > 1, cp=cp, ep=ep)


def context_parallel_sizes(framework: str, seq_len: int, limit: int) -> list[int]:
    """cp values the search tries: 1, and for a long sequence on a stack with context
    parallelism, powers of two that split it into 2 x cp equal chunks (Megatron's load-balanced
    causal split, megatron/core/utils.py get_batch_on_this_cp_rank) of at least
    CP_MIN_TOKENS_PER_RANK tokens per rank."""
    if not recipe_profile(framework).context_parallel or seq_len < CP_MIN_SEQ_LEN:
        return [1]
    return [c for c in powers_of_two(min(MAX_CP, limit))
            if c == 1 or (seq_len % (2 * c) == 0 and seq_len // c >= CP_MIN_TOKENS_PER_RANK)]


class MemoryTable:
    """Peak bytes per plan for one job, memoised: memory does not depend on the GPU type."""

    def __init__(self, arch: ModelArch, training: TrainingSpec, ep: int = 1):
        self.arch, self.recipe, self.seq_len = arch, training.recipe, training.seq_len
        self.ep = ep  # expert parallelism of every plan of this table (1: none)
        self.global_batch = training.global_batch_size
        self.peaks: dict[tuple, int] = {}
        self.calls = 0  # estimate_memory calls (for the benchmark)
        self.memo: dict = {}  # estimate_memory's terms, shared by the plans of this job
        recipe = training.recipe
        fp32 = recipe.precision == "fp32"
        self._weight_b = 4 if fp32 else 2
        self._grad_b = 4 if fp32 or recipe.grad_dtype == "fp32" else 2
        # fp32 master copy (none when training in fp32) + the optimizer's moments
        self._optimizer_b = (0 if fp32 else 4) + OPTIMIZER_MOMENT_BYTES[recipe.optimizer]
        self._params = arch.num_params()
        # routed-expert parameters a rank does not hold under expert parallelism
        self._other_experts = arch.num_layers * arch.expert_layer_params() * (ep - 1) // ep
        # how the stack runs a plan's ZeRO stage (the reference trainer's TP/PP plans: FSDP2)
        self._as_run = recipe_profile(recipe.framework).plan_as_run
        self._floors: dict[tuple[int, int, int, int, int], float] = {}

    def floor_bytes(self, tp: int, pp: int, dp: int, zero: int, cp: int = 1) -> float:
        """A cheap lower bound on peak bytes: ZeRO model states of an average rank (no
        activations, no overhead), so that hopeless plans skip the full estimate. ZeRO shards
        over dp x cp ranks (context-parallel ranks hold the same weights)."""
        key = (tp, pp, dp, zero, cp)
        floor = self._floors.get(key)
        if floor is None:
            floor = self._floors[key] = self._floor_bytes(tp, pp, dp, zero, cp)
        return floor

    def _floor_bytes(self, tp: int, pp: int, dp: int, zero: int, cp: int) -> float:
        if self._as_run is not None:  # the ZeRO stage and sharding as the stack runs them
            run = self._as_run(make_plan(tp, pp, dp, zero, 1, "none"))
            dp, zero = run.dp, run.zero
        params = (self._params - self._other_experts) / (tp * pp)
        shards = dp * cp
        if zero == 0:
            return params * (self._weight_b + self._grad_b + self._optimizer_b)
        if zero == 1:
            return params * (self._weight_b + self._grad_b + self._optimizer_b / shards)
        return self._params / (tp * pp) * self._optimizer_b / shards  # FSDP: sharded states

    def estimate(self, plan: ParallelPlan) -> MemoryEstimate:
        """The full estimate of one plan (its three peaks), for the options returned."""
        return estimate_memory(self.arch, self.recipe, plan, self.seq_len,
                               grad_accum=plan.grad_accum(self.global_batch), memo=self.memo)

    def peak_bytes(self, tp: int, pp: int, dp: int, zero: int, mb: int, recompute: str,
                   cp: int = 1) -> int:
        key = (tp, pp, dp, zero, mb, recompute, cp)
        peak = self.peaks.get(key)
        if peak is None:
            self.calls += 1
            plan = make_plan(tp, pp, dp, zero, mb, recompute, self.ep, cp)
            peak = estimate_memory(self.arch, self.recipe, plan, self.seq_len,
                                   grad_accum=plan.grad_accum(self.global_batch),
                                   memo=self.memo).peak_bytes
            self.peaks[key] = peak
        return peak


def powers_of_two(limit: int) -> Iterator[int]:
    value = 1
    while value <= limit:
        yield value
        value *= 2


def model_parallel_shapes(arch: ModelArch, gpu: GpuType, limit: int) -> list[tuple[int, int]]:
    """(tp, pp) pairs: tp divides the heads, kv heads, vocabulary and FFN width (what the
    reference trainer's tensor parallelism splits evenly; gpt2's 50257 tokens allow none without
    Megatron's vocabulary padding) and fits a node; pp divides the layers (an even split, which
    every stack's own rule runs: frenzy_predictor.pipeline_split).

    The search does not offer uneven pipelines yet, though MARP predicts them and the reference
    trainer and torchtitan run them (`frenzy predict --pp`, a fixed plan): offering them changes
    the menus of a quarter of the simulated trace jobs (gpt2's 12 layers and tinyllama's 22 at
    pp 4 and 8), and every scheduling figure (docs/has.md) would have to be measured again
    on the new menus first.

    Pipelines take the widest tp on NVLink cards (Narayanan et al. 2021: fill the node with tp
    first, then pipeline across nodes) and no tp on PCIe cards, whose tp all-reduces are slow.
    """
    tps = [t for t in powers_of_two(min(MAX_TP, gpu.typical_gpus_per_node, limit))
           if not (arch.num_heads % t or arch.num_kv_heads % t or arch.vocab_size % t
                   or arch.ffn_hidden_size % t)]
    pps = [p for p in powers_of_two(min(MAX_PP, arch.num_layers, limit)) if arch.num_layers % p == 0]
    pipeline_tp = tps[-1] if gpu.nvlink_gbs_per_gpu > 0 else 1
    shapes = [(t, 1) for t in tps] + [(pipeline_tp, p) for p in pps if p > 1]
    return sorted(s for s in shapes if s[0] * s[1] <= limit)


def micro_batches(global_batch: int, dp: int, seq_len: int, cp: int = 1) -> list[int]:
    """Micro-batch sizes that divide the per-replica batch, up to MAX_TOKENS_PER_MICRO_BATCH
    per rank (a context-parallel rank holds seq_len / cp tokens of each sequence)."""
    per_replica = global_batch // dp
    cap = max(1, MAX_TOKENS_PER_MICRO_BATCH * cp // seq_len)
    return [m for m in powers_of_two(min(per_replica, cap)) if per_replica % m == 0]


class _JobSpace:
    """What the search space of one job looks like on any GPU type, memoised per enumeration:
    the (tp, pp) shapes and micro-batch sizes the job's launcher can run (frenzy.runnable),
    and the ZeRO stages of each (pp, dp)."""

    def __init__(self, arch: ModelArch, training: TrainingSpec, zero_stages: Sequence[int]):
        self.arch, self.training, self.zero_stages = arch, training, sorted(set(zero_stages))
        self.pipeline_zero_stages = recipe_profile(training.recipe.framework).pipeline_zero_stages
        self._micro_batches: dict[tuple[int, int, int, int], list[int]] = {}
        self._zeros: dict[tuple[int, int], list[int]] = {}

    def runnable(self, tp: int, pp: int, dp: int, mb: int) -> bool:
        """Whether the job's launcher runs this layout and micro-batch (ZeRO and recompute
        never decide it)."""
        t = self.training
        return runnable_plan(self.arch, make_plan(tp, pp, dp, 0, mb, "none"), seq_len=t.seq_len,
                             global_batch=t.global_batch_size, framework=t.recipe.framework) is None

    def shapes(self, gpu: GpuType, limit: int) -> list[tuple[int, int]]:
        """model_parallel_shapes the launcher runs with some dp and micro-batch (one replica and
        micro-batches of one give a pipeline the most micro-batches)."""
        return [(tp, pp) for tp, pp in model_parallel_shapes(self.arch, gpu, limit)
                if self.runnable(tp, pp, 1, 1)]

    def micro_batches(self, dp: int, tp: int = 1, pp: int = 1, cp: int = 1) -> list[int]:
        key = (dp, tp, pp, cp)
        mbs = self._micro_batches.get(key)
        if mbs is None:
            mbs = self._micro_batches[key] = [
                m for m in micro_batches(self.training.global_batch_size, dp, self.training.seq_len,
                                         cp)
                if self.runnable(tp, pp, dp, m)]
        return mbs

    def zeros(self, pp: int, dp: int) -> list[int]:
        """ZeRO stages worth trying: none without replicas; with pipelines those the stack
        combines with them (RecipeProfile.pipeline_zero_stages: 0-1, as Megatron and DeepSpeed
        refuse ZeRO-2/3 with pipelining; torchtitan 0 and 2). `dp` counts the ranks that
        shard: dp x cp."""
        zeros = self._zeros.get((pp, dp))
        if zeros is None:
            if dp == 1:
                zeros = [0]
            elif pp > 1:
                zeros = [z for z in self.zero_stages if z in self.pipeline_zero_stages] or [0]
            else:
                zeros = self.zero_stages
            self._zeros[(pp, dp)] = zeros
        return zeros


@dataclass
class _Best:
    step_s: float
    plan: ParallelPlan  # fits by the estimates made or by monotonicity; verified at the end


class _TypeSearch:
    """Branch and bound for one GPU type: the fastest fitting plan per GPU count."""

    def __init__(self, gpu: GpuType, arch: ModelArch, training: TrainingSpec, table: MemoryTable,
                 space: _JobSpace, recomputes: Sequence[str], fit_margin: float,
                 memory_margin: float = 1.0):
        self.arch, self.training, self.table = arch, training, table
        self.space, self.recomputes = space, recomputes
        # a learned margin m asks that m x the predicted peak fit
        self.usable = usable_bytes(gpu, fit_margin) / memory_margin
        self.cost = CostModel(arch, training, gpu, table.ep)
        self.best: dict[int, _Best] = {}
        # Largest micro-batch that fitted per (tp, pp, cp) and (zero, recompute index) at a
        # smaller or equal dp. Memory never grows with dp (beyond one GPU), with the ZeRO stage
        # or with recompute, so it also fits any (zero', recompute') >= (zero, recompute) here.
        self.fitted_mb: dict[tuple[int, int, int], dict[tuple[int, int], int]] = {}

    def incumbent_s(self, n: int) -> float:
        return self.best[n].step_s if n in self.best else math.inf

    def largest_fitting(self, tp: int, pp: int, dp: int, zero: int, i: int, mbs: list[int],
                        cp: int = 1) -> int:
        """Index of the largest micro-batch that fits, or -1 (binary search: memory grows with it)."""
        rc, table, usable = self.recomputes[i], self.table, self.usable
        fitted = self.fitted_mb.setdefault((tp, pp, cp), {})
        previous = max([m for (z, j), m in fitted.items() if z <= zero and j <= i], default=0)
        lo = bisect.bisect_right(mbs, previous) - 1  # mbs ascend
        if lo < 0:  # settle the common "nothing fits" case cheaply
            if (table.floor_bytes(tp, pp, dp, zero, cp) > usable
                    or table.peak_bytes(tp, pp, dp, zero, mbs[0], rc, cp) > usable):
                return -1
            lo = 0
        hi = len(mbs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if table.peak_bytes(tp, pp, dp, zero, mbs[mid], rc, cp) <= usable:
                lo = mid
            else:
                hi = mid - 1
        if tp * pp * dp * cp > 1:  # a single GPU has no NCCL buffers: not a bound for dp = 2
            fitted[(zero, i)] = max(fitted.get((zero, i), 0), mbs[lo])
        return lo

    def floor(self, tp: int, pp: int, dp: int, cp: int = 1) -> tuple[float, int, list[int]]:
        """(lower bound on any plan's step time, its micro-batch, micro-batch choices).

        The bound is the pipelined compute alone: no recompute, no data-parallel traffic.
        """
        mbs = self.space.micro_batches(dp, tp, pp, cp)
        if pp == 1:
            return self.cost.pipeline_s(tp, pp, dp, mbs[-1], "none", cp), mbs[-1], mbs
        floor_s, mb_hint = min([(self.cost.pipeline_s(tp, pp, dp, m, "none", cp), m) for m in mbs])
        return floor_s, mb_hint, mbs

    def layout(self, tp: int, pp: int, dp: int, mb_hint: int, mbs: list[int], cp: int = 1) -> None:
        """Try every ZeRO stage and recompute for one (tp, pp, dp, cp), most promising first."""
        n, cost, recomputes = tp * pp * dp * cp, self.cost, self.recomputes
        incumbent_s = self.incumbent_s(n)  # only this method improves it meanwhile
        zeros = self.space.zeros(pp, dp * cp)
        # Candidates in order of their bound (memory ignored); heavier recompute is queued only
        # when the lighter one could not fit the largest micro-batch.
        bounds = cost.step_s_by_zero(tp, pp, dp, mb_hint, recomputes[0], cp)
        queue = [(bounds[z], z, 0) for z in zeros]
        heapq.heapify(queue)
        if queue[0][0] >= incumbent_s:
            return  # no ZeRO stage can win here, before any memory estimate
        if self.table.peak_bytes(tp, pp, dp, zeros[-1], mbs[0], recomputes[-1], cp) > self.usable:
            return  # not even the least memory-hungry plan fits
        too_big: list[tuple[int, int]] = []  # (zero, recompute index) whose smallest mb failed
        while queue:
            bound_s, zero, i = heapq.heappop(queue)
            if bound_s >= incumbent_s:
                break  # nothing left can win, memory aside
            if any(z >= zero and j >= i for z, j in too_big):
                top = -1  # a plan needing less memory already did not fit
            else:
                top = self.largest_fitting(tp, pp, dp, zero, i, mbs, cp)
            # Heavier recompute: when nothing fits, or (selective only, it is cheap) to fit a
            # larger micro-batch; full recompute's +33% compute never pays for a larger one.
            if i + 1 < len(recomputes) and (
                    top < 0 or (top < len(mbs) - 1 and recomputes[i + 1] == "selective")):
                heavier_s = cost.step_s(tp, pp, dp, zero, mb_hint, recomputes[i + 1], cp)
                heapq.heappush(queue, (heavier_s, zero, i + 1))
            if top < 0:
                too_big.append((zero, i))
                continue
            # Without pipelining larger micro-batches are never slower; with it they grow the bubble.
            rc = recomputes[i]
            if pp == 1:
                step_s, mb = cost.step_s(tp, pp, dp, zero, mbs[top], rc, cp), mbs[top]
            else:
                step_s, mb = min([(cost.step_s(tp, pp, dp, zero, m, rc, cp), m)
                                  for m in mbs[:top + 1]])
            if step_s < incumbent_s:
                self.best[n] = _Best(step_s, make_plan(tp, pp, dp, zero, mb, rc, self.table.ep, cp))
                incumbent_s = step_s

    def layouts(self, shapes: list[tuple[int, int]], cps: list[int],
                n: int) -> Iterator[tuple[int, int, int, int]]:
        """(tp, pp, dp, cp) with n GPUs whose model states could fit (a cheap bound, no estimate)."""
        batch = self.training.global_batch_size
        for tp, pp in shapes:
            for cp in cps:
                dp = n // (tp * pp * cp)
                if dp * tp * pp * cp == n and batch % dp == 0 and dp % self.table.ep == 0 and \
                        self.space.micro_batches(dp, tp, pp, cp) and \
                        self.table.floor_bytes(tp, pp, dp, self.space.zeros(pp, dp * cp)[-1],
                                               cp) <= self.usable:
                    yield tp, pp, dp, cp

    def seed(self, plans: Iterable[ParallelPlan], shapes: list[tuple[int, int]],
             cps: list[int]) -> None:
        """Start from plans that won on other GPU types: a good incumbent early lets the
        bounds prune most layouts (their estimates are usually in the table already)."""
        for p in plans:
            if (p.tp, p.pp) not in shapes or p.cp not in cps \
                    or p.zero not in self.space.zeros(p.pp, p.dp * p.cp) \
                    or p.recompute not in self.recomputes:
                continue
            values = (p.tp, p.pp, p.dp, p.zero, p.micro_batch, p.recompute, p.cp)
            step_s = self.cost.step_s(*values)
            if step_s < self.incumbent_s(p.num_gpus) and \
                    self.table.peak_bytes(*values) <= self.usable:
                self.best[p.num_gpus] = _Best(step_s, p)

    def run(self, gpu: GpuType, limit: int, seeds: dict[int, list[ParallelPlan]],
            min_gpus: int = 1) -> dict[int, _Best]:
        """GPU counts in doubling order from min_gpus; at each, layouts in order of their
        compute bound."""
        shapes = self.space.shapes(gpu, limit)
        cps = context_parallel_sizes(self.training.recipe.framework, self.training.seq_len, limit)
        fastest_s, stalls = math.inf, 0
        for n in powers_of_two(limit):
            if n < min_gpus:
                continue
            self.seed(seeds.get(n, ()), shapes, cps)
            layouts = sorted((*self.floor(tp, pp, dp, cp), tp, pp, dp, cp)
                             for tp, pp, dp, cp in self.layouts(shapes, cps, n))
            for floor_s, mb_hint, mbs, tp, pp, dp, cp in layouts:
                if floor_s >= self.incumbent_s(n):
                    break  # sorted: no later layout can beat the plan we have
                self.layout(tp, pp, dp, mb_hint, mbs, cp)
            if n not in self.best:
                continue  # more GPUs may shard enough to fit
            if self.best[n].step_s < fastest_s * 0.999:
                fastest_s, stalls = self.best[n].step_s, 0
            else:
                stalls += 1  # more GPUs, no faster: dominated in duration and GPU-seconds
                if stalls >= DP_STALL_LIMIT:
                    break
        return self.best


def pareto_front(options: Sequence[PlanOption]) -> list[PlanOption]:
    """Options not dominated in (duration, GPU-seconds), fastest first."""
    front: list[PlanOption] = []
    cheapest = math.inf
    for option in sorted(options, key=lambda o: (o.duration_s, o.gpu_seconds)):
        if option.gpu_seconds < cheapest:
            front.append(option)
            cheapest = option.gpu_seconds
    return front


def _spread(front: list[PlanOption], k: int) -> list[PlanOption]:
    """At most k options of a front, keeping both ends and evenly spaced ones between."""
    if len(front) <= k:
        return front
    if k <= 1:  # no room for both ends: the front's first option
        return front[:k]
    picks = sorted({round(i * (len(front) - 1) / (k - 1)) for i in range(k)})
    return [front[i] for i in picks]


def rank_options(options: Sequence[PlanOption]) -> list[PlanOption]:
    """Efficient options first (>= 80% scaling efficiency on their type), then by duration.

    Scaling efficiency = the type's cheapest GPU-seconds / the option's GPU-seconds: a user
    gets the fastest plan that does not waste GPUs, and the scheduler still sees every option.
    """
    cheapest: dict[str, float] = {}
    for o in options:
        cheapest[o.gpu_type] = min(cheapest.get(o.gpu_type, math.inf), o.gpu_seconds)

    def key(o: PlanOption) -> tuple[int, float, float]:
        efficient = cheapest[o.gpu_type] >= EFFICIENT_SCALING * o.gpu_seconds
        return (0 if efficient else 1, o.duration_s, o.gpu_seconds)

    return sorted(options, key=key)


def enumerate_options(arch: ModelArch, training: TrainingSpec, gpu_types: Sequence[GpuType],
                      constraints: Constraints = Constraints(), max_gpus: int = MAX_GPUS, *,
                      zero_stages: Sequence[int] = (0, 1, 2, 3),
                      recomputes: Sequence[str] = RECOMPUTES,
                      max_per_type: int = MAX_OPTIONS_PER_TYPE,
                      fit_margin: float = FIT_MARGIN,
                      now_s: float | None = None,
                      memory_table: MemoryTable | None = None,
                      min_gpus: int = 0, ep: int = 1,
                      memory_margins: Mapping[str, float] | None = None) -> list[PlanOption]:
    """Ranked options: each allowed GPU type's Pareto front over duration and GPU-seconds.

    `ep` > 1 (a mixture-of-experts model): every plan spreads the experts over ep of its
    data-parallel ranks, so only layouts whose dp it divides are searched.
    `memory_margins` (GPU type -> factor >= 1, learned from measured peaks; see
    error_table.learned_margins): a plan fits a type when factor x its device peak does, and
    the option's peak_bytes_per_gpu is that product.

    `zero_stages` / `recomputes` restrict what the launcher supports; `now_s` (epoch seconds)
    drops options that would miss `constraints.deadline_s` if started now; `min_gpus` > 0
    drops GPU counts below it before the fronts are taken (so a faster but costlier count is
    not lost to a cheaper one that is not allowed).
    """
    limit = min(max_gpus, constraints.max_gpus) if constraints.max_gpus > 0 else max_gpus
    offered = recipe_profile(training.recipe.framework).zero_stages  # what the stack can run
    zero_stages = [z for z in zero_stages if z in offered] or [0]
    recomputes = [rc for rc in RECOMPUTES if rc in recomputes]  # cheapest first
    if training.recipe.attention == "flash" and len(recomputes) > 1:
        # Selective recompute (Korthikanti et al. 2022) drops the s x s attention activations,
        # which flash attention never stores: it would cost time and save almost nothing.
        recomputes = [rc for rc in recomputes if rc != "selective"]
    table = memory_table or MemoryTable(arch, training, ep)
    space = _JobSpace(arch, training, zero_stages)
    steps = training.steps
    options: list[PlanOption] = []
    seeds: dict[int, list[ParallelPlan]] = {}  # winners on the types searched so far, per count
    for gpu in gpu_types:
        if constraints.gpu_types and gpu.name not in constraints.gpu_types:
            continue
        margin = max(1.0, (memory_margins or {}).get(gpu.name, 1.0))
        best = _TypeSearch(gpu, arch, training, table, space, recomputes,
                           fit_margin, margin).run(gpu, limit, seeds, max(1, min_gpus))
        for n, b in best.items():
            if b.plan not in seeds.setdefault(n, []):
                seeds[n].append(b.plan)
        per_type = [PlanOption(gpu.name, b.plan, 0, b.step_s, b.step_s * steps)
                    for b in best.values()]
        if now_s is not None and constraints.deadline_s > 0:
            per_type = [o for o in per_type if now_s + o.duration_s <= constraints.deadline_s]
        for option in _spread(pareto_front(per_type), max_per_type):
            est = table.estimate(option.plan)  # the exact estimate, for the plans we return
            peak = math.ceil(est.device_peak_bytes * margin)
            if peak <= usable_bytes(gpu, fit_margin):
                options.append(replace(option, peak_bytes_per_gpu=peak, memory_margin=margin,
                                       peak_allocated_bytes=est.peak_allocated_bytes,
                                       peak_reserved_bytes=est.peak_reserved_bytes))
    return rank_options(options)
