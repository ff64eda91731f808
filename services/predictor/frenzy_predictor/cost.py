"""Step time of a plan on a GPU type (first version: FLOPs over an efficiency-scaled peak)."""
from __future__ import annotations

from frenzy.catalog.gpus import GpuType
from frenzy.catalog.models import ModelArch
from frenzy.domain import ParallelPlan, TrainingSpec

MFU = 0.4  # model FLOPs utilisation typically reached by LLM training


def step_time_s(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    flops = 6 * arch.num_params() * training.tokens_per_step
    return flops / (plan.num_gpus * gpu.peak_tflops_16bit * 1e12 * MFU)
