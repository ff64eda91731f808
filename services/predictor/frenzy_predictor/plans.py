"""Enumerate feasible (GPU type, count, plan) options for a job (first version: data parallel only)."""
from __future__ import annotations

from typing import Sequence

from frenzy.catalog.gpus import GpuType
from frenzy.catalog.models import ModelArch
from frenzy.domain import Constraints, ParallelPlan, PlanOption, TrainingSpec
from frenzy_predictor.cost import step_time_s
from frenzy_predictor.memory import estimate_memory

FIT_MARGIN = 0.95  # use at most this fraction of a GPU's memory


def enumerate_options(arch: ModelArch, training: TrainingSpec, gpu_types: Sequence[GpuType],
                      constraints: Constraints = Constraints(), max_gpus: int = 64) -> list[PlanOption]:
    options: list[PlanOption] = []
    limit = min(max_gpus, constraints.max_gpus or max_gpus)
    for gpu in gpu_types:
        if constraints.gpu_types and gpu.name not in constraints.gpu_types:
            continue
        dp = 1
        while dp <= limit:
            if training.global_batch_size % dp == 0:
                plan = ParallelPlan(dp=dp, zero=1 if dp > 1 else 0, micro_batch=1)
                mem = estimate_memory(arch, training.recipe, plan, training.seq_len)
                if mem.peak_bytes <= gpu.memory_bytes * FIT_MARGIN:
                    step = step_time_s(arch, training, plan, gpu)
                    options.append(PlanOption(gpu.name, plan, mem.peak_bytes, step, step * training.steps))
                    break  # first version: smallest fitting dp per type
            dp *= 2
    return sorted(options, key=lambda o: (o.duration_s, o.num_gpus))
