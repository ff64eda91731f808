"""Per-rank peak memory of one training step (first version: model states + Korthikanti activations)."""
from __future__ import annotations

from dataclasses import dataclass, field

from frenzy.catalog.models import ModelArch
from frenzy.domain import ParallelPlan, Recipe

GIB = 1024**3
FRAMEWORK_OVERHEAD_BYTES = 1 * GIB  # CUDA context + NCCL buffers + allocator margin


@dataclass(frozen=True)
class MemoryEstimate:
    peak_tensor_bytes: int  # comparable to torch.cuda.max_memory_allocated
    peak_bytes: int  # plus framework overhead; used to decide fit
    breakdown: dict[str, int] = field(default_factory=dict)


def estimate_memory(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int) -> MemoryEstimate:
    params_per_rank = arch.num_params() / (plan.tp * plan.pp)
    weights = 2 * params_per_rank
    grads = 4 * params_per_rank / (plan.dp if plan.zero >= 2 else 1)
    optimizer = 12 * params_per_rank / (plan.dp if plan.zero >= 1 else 1)
    s, b, h, a = seq_len, plan.micro_batch, arch.hidden_size, arch.num_heads
    per_layer = s * b * h * (34 + 5 * a * s / h) / plan.tp
    activations = per_layer * arch.num_layers / plan.pp * plan.pp  # 1F1B: p micro-batches in flight
    breakdown = {"parameters": int(weights), "gradients": int(grads),
                 "optimizer_states": int(optimizer), "activations": int(activations)}
    tensors = sum(breakdown.values())
    return MemoryEstimate(tensors, tensors + FRAMEWORK_OVERHEAD_BYTES, breakdown)
