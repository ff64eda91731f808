"""Turn trace jobs into LLM training jobs with MARP options, reproducibly from a seed.

Each trace job gets a catalog model sized by its GPU count (drawn with a per-job RNG seeded by
`seed` and the job id, so a job's model does not depend on which window it is in). The token
budget is set so that the job's GPU-seconds on the trace's *reference GPU type* equal the
trace's GPU-seconds (duration x GPUs): when MARP has an option on the reference type with the
trace's GPU count, its duration equals the trace duration exactly. Speeds on other types come
from MARP (`enumerate_options`), enumerated once per (model, global batch) and rescaled per
job, because only the step count differs between such jobs.

Realism (docs/simulator.md): a job's global batch is what its trace GPUs held
(`SEQUENCES_PER_TRACE_GPU` each), so its data-parallel width is bounded by that batch and a
job cannot widen without limit; MARP plans against the cluster's real node sizes (tp within a
node, the inter-node terms of the cost model past it); each job's restart (checkpoint
restore) cost follows its model size, in the range Sia measured.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Sequence

from frenzy.catalog.gpus import GpuType, get_gpu
from frenzy.catalog.models import load_model
from frenzy.domain import PlanOption, TrainingSpec
from frenzy_predictor.plans import enumerate_options
from frenzy_scheduler.simulator.trace import TraceJob

# Philly ran on V100-class GPUs; the generic format may name the type per job instead.
DEFAULT_REFERENCE_GPU = "V100-32GB"
SEQ_LEN = 1024
# Sequences of SEQ_LEN tokens per trace GPU in a job's global batch: 16K tokens per GPU per
# step, a common LLM setting (e.g. micro-batch 4 x 4 accumulation steps). A job may widen up to
# 16x its trace width before a replica would hold less than one sequence.
SEQUENCES_PER_TRACE_GPU = 16
NOMINAL_STEPS = 1000
MAX_GPUS = 64
# Restart cost: Sia measured 25-250 s per model on its cluster (checkpoint, restore, warm-up;
# sia-simulator/sia.py get_restart_penalty). We scale by checkpoint size (16 bytes per
# parameter: weights, gradients-free Adam state in fp32) at RESTORE_BYTES_PER_S on top of a
# fixed start, clipped to Sia's range.
RESTART_BASE_S = 30.0
RESTORE_BYTES_PER_S = 2e9
RESTART_RANGE_S = (25.0, 250.0)

# (smallest trace GPU count, models of that size class). A job draws from the largest class
# its GPU count reaches, among models that MARP can fit on the reference type within that count.
SIZE_CLASSES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("gpt2", "gpt2-medium", "gpt2-large", "tinyllama-1.1b", "llama3.2-1b")),
    (2, ("gpt2-large", "gpt2-xl", "tinyllama-1.1b", "llama3.2-1b")),
    (8, ("gpt2-xl", "llama2-7b", "mistral-7b", "llama3-8b")),
    (16, ("llama2-7b", "mistral-7b", "llama3-8b", "llama2-13b")),
    (32, ("llama3-8b", "llama2-13b", "llama2-70b", "llama3-70b")),
)


@dataclass(frozen=True)
class SimJob:
    """A trace job turned into what the scheduler sees."""

    job_id: str
    submit_time_s: float
    options: tuple[PlanOption, ...]  # only options on types the cluster has
    model: str
    trace_gpus: int
    trace_duration_s: float
    deadline_s: float = 0.0  # absolute simulation time; 0: none
    reference_gpu_seconds: float = 0.0  # trace work on the reference type
    restart_overhead_s: float = RESTART_RANGE_S[0]  # checkpoint restore on every resume
    global_batch: int = 0  # sequences per step (bounds the data-parallel width)


def global_batch_for(trace_gpus: int) -> int:
    """The job's global batch: SEQUENCES_PER_TRACE_GPU per trace GPU, to a power of two."""
    return 1 << max(0, math.ceil(math.log2(SEQUENCES_PER_TRACE_GPU * max(1, trace_gpus))))


def restart_overhead_s(num_params: int) -> float:
    low, high = RESTART_RANGE_S
    return min(high, max(low, RESTART_BASE_S + 16 * num_params / RESTORE_BYTES_PER_S))


class WorkloadMapper:
    """Maps trace jobs for one cluster; caches MARP's options per (model, shape)."""

    def __init__(self, cluster_gpu_types: Sequence[str], seed: int = 0,
                 reference_gpu: str = DEFAULT_REFERENCE_GPU,
                 node_sizes: dict[str, int] | None = None) -> None:
        self.cluster_types = tuple(sorted({get_gpu(t).name for t in cluster_gpu_types}))
        self.seed = seed
        self.reference_gpu = get_gpu(reference_gpu).name
        # GPUs per node of each cluster type (the largest node of the type); MARP plans tp
        # and the inter-node terms against these, not the catalogue's typical node.
        self.node_sizes = {get_gpu(t).name: n for t, n in (node_sizes or {}).items()}
        self._cache: dict[tuple[str, int, str], tuple[PlanOption, ...]] = {}

    def _gpu(self, name: str) -> GpuType:
        gpu = get_gpu(name)
        size = self.node_sizes.get(gpu.name)
        return replace(gpu, typical_gpus_per_node=size) if size else gpu

    def base_options(self, model: str, extra_type: str = "",
                     global_batch: int = 0) -> tuple[PlanOption, ...]:
        """MARP's options for NOMINAL_STEPS steps on the cluster's types plus the reference."""
        extra = get_gpu(extra_type).name if extra_type else self.reference_gpu
        batch = global_batch or global_batch_for(1)
        key = (model, batch, extra)
        if key not in self._cache:
            types: list[GpuType] = [self._gpu(t) for t in sorted({*self.cluster_types, extra})]
            training = TrainingSpec(SEQ_LEN, batch, NOMINAL_STEPS * SEQ_LEN * batch)
            self._cache[key] = tuple(enumerate_options(load_model(model), training, types,
                                                       max_gpus=MAX_GPUS))
        return self._cache[key]

    def _min_gpus_on(self, model: str, gpu_type: str, global_batch: int) -> int:
        counts = [o.num_gpus for o in self.base_options(model, "", global_batch)
                  if o.gpu_type == gpu_type]
        return min(counts) if counts else 0

    def draw_model(self, job: TraceJob) -> str:
        """A catalog model sized by the job's GPU count, reproducible from (seed, job id)."""
        rng = random.Random(f"{self.seed}:{job.job_id}")
        reachable = [models for floor, models in SIZE_CLASSES if job.num_gpus >= floor]
        for models in reversed(reachable):  # largest class first, fall back to smaller ones
            batch = global_batch_for(job.num_gpus)
            fits = [m for m in models
                    if 0 < self._min_gpus_on(m, self.reference_gpu, batch) <= job.num_gpus]
            if fits:
                return rng.choice(fits)
        return SIZE_CLASSES[0][1][0]

    def map_job(self, job: TraceJob) -> SimJob:
        model = job.model or self.draw_model(job)
        reference = get_gpu(job.gpu_type).name if job.gpu_type else self.reference_gpu
        batch = global_batch_for(job.num_gpus)
        base = self.base_options(model, reference, batch)
        steps = _calibrated_steps(base, reference, job)
        options = tuple(replace(o, duration_s=o.step_time_s * steps)
                        for o in base if o.gpu_type in self.cluster_types)
        deadline = job.submit_time_s + job.deadline_after_s if job.deadline_after_s > 0 else 0.0
        return SimJob(job.job_id, job.submit_time_s, options, model, job.num_gpus,
                      job.duration_s, deadline, job.duration_s * job.num_gpus,
                      restart_overhead_s(load_model(model).num_params()), batch)

    def map_jobs(self, jobs: Sequence[TraceJob]) -> list[SimJob]:
        return [self.map_job(j) for j in jobs]


def _calibrated_steps(options: Sequence[PlanOption], reference: str, job: TraceJob) -> float:
    """Steps that make the job's GPU-seconds on the reference type equal the trace's.

    The reference option is the fastest one with the trace's GPU count, else the largest
    count below it, else the smallest above. If the model does not fit the reference type at
    all, the most GPU-efficient option stands in, scaled by the datasheet peak ratio.
    """
    target_gpu_s = job.duration_s * job.num_gpus
    on_reference = [o for o in options if o.gpu_type == reference]
    if on_reference:
        def rank(o: PlanOption) -> tuple[int, int, float]:
            if o.num_gpus == job.num_gpus:
                return (0, 0, o.step_time_s)
            if o.num_gpus < job.num_gpus:
                return (1, -o.num_gpus, o.step_time_s)
            return (2, o.num_gpus, o.step_time_s)
        ref = min(on_reference, key=rank)
        return target_gpu_s / (ref.step_time_s * ref.num_gpus)
    if not options:
        return 1.0
    ref = min(options, key=lambda o: o.step_time_s * o.num_gpus)
    speed_ratio = get_gpu(ref.gpu_type).peak_tflops_16bit / get_gpu(reference).peak_tflops_16bit
    return target_gpu_s / (ref.step_time_s * ref.num_gpus * speed_ratio)


def parity_menu(jobs: Sequence[SimJob]) -> list[SimJob]:
    """The parity ablation's menu: every job's options capped at its trace GPU count (its
    fewest-GPU options when none is that small), so all policies choose among the same,
    narrow options and differ only in ordering and placement."""
    out = []
    for job in jobs:
        capped = tuple(o for o in job.options if o.num_gpus <= job.trace_gpus)
        if not capped and job.options:
            fewest = min(o.num_gpus for o in job.options)
            capped = tuple(o for o in job.options if o.num_gpus == fewest)
        out.append(replace(job, options=capped))
    return out
