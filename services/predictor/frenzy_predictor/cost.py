"""Step time of a parallel plan on a GPU type: a roofline for compute plus a ring model for comms.

One training step on the slowest pipeline stage of one GPU is

    step = (m + p - 1) * (micro-batch compute + tensor-parallel all-reduces + pipeline sends)
           + exposed data-parallel / ZeRO communication + optimizer update

with m micro-batches per step (gradient accumulation) and p pipeline stages, so (p-1)/(m+p-1)
of the pipelined part is the 1F1B bubble. Every constant below is a knob with its source; the
derivation and the sources are in docs/marp-plans.md ("Cost model").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from frenzy.catalog.gpus import GpuType
from frenzy.catalog.models import ModelArch
from frenzy.domain import ParallelPlan, TrainingSpec

GB = 1e9  # the catalog's bandwidths are decimal GB/s


@dataclass(frozen=True)
class Generation:
    """What a GPU generation achieves in practice, as opposed to its datasheet."""

    mfu: float  # model FLOPs utilisation of large GEMM-bound training, fraction of 16-bit peak
    fp32_rate: float  # fp32 (TF32 where available) matmul rate as a fraction of the 16-bit peak
    network_gbs_per_node: float  # inter-node bandwidth of a typical node, GB/s (NICs summed)


# MFU sources (docs/marp-plans.md has the full list):
#   volta:     Megatron-LM (Shoeybi et al. 2019): 39 TFLOP/s per V100 = 30% of peak.
#   ampere:    Megatron-LM at scale (Narayanan et al. 2021): 52% of A100 peak; we use 0.50.
#   hopper:    Llama 3 (Dubey et al. 2024, Table 4): 38-43% BF16 MFU on H100; we use 0.40.
#   others:    assumptions inside the 30-55% band the gpus.csv README quotes, lower for
#              power-capped or consumer boards, lower for a generation whose software is young.
# Networks: DGX-1 4x100 Gb/s EDR, DGX A100 8x200 Gb/s HDR, DGX H100/B200 8x400 Gb/s NDR;
# PCIe servers: one 100 Gb/s Ethernet NIC per node (assumption).
GENERATIONS: dict[str, Generation] = {
    "pascal": Generation(mfu=0.35, fp32_rate=0.5, network_gbs_per_node=50.0),
    "volta": Generation(mfu=0.30, fp32_rate=0.125, network_gbs_per_node=50.0),
    "turing": Generation(mfu=0.25, fp32_rate=0.125, network_gbs_per_node=12.5),
    "ampere-pcie": Generation(mfu=0.40, fp32_rate=0.5, network_gbs_per_node=12.5),
    "ampere": Generation(mfu=0.50, fp32_rate=0.5, network_gbs_per_node=200.0),
    "ada": Generation(mfu=0.35, fp32_rate=0.5, network_gbs_per_node=12.5),
    "hopper": Generation(mfu=0.40, fp32_rate=0.5, network_gbs_per_node=400.0),
    "blackwell": Generation(mfu=0.35, fp32_rate=0.5, network_gbs_per_node=400.0),
}
DEFAULT_GENERATION = Generation(mfu=0.30, fp32_rate=0.125, network_gbs_per_node=12.5)

# Catalog name prefix -> generation; an unknown type gets DEFAULT_GENERATION.
GENERATION_OF_PREFIX: tuple[tuple[str, str], ...] = (
    ("P100", "pascal"), ("V100", "volta"), ("T4", "turing"), ("RTX-2080", "turing"),
    ("Quadro-RTX", "turing"), ("RTX-3090", "ampere-pcie"), ("A10", "ampere-pcie"),
    ("A100", "ampere"), ("A800", "ampere"), ("RTX-4090", "ada"), ("L40", "ada"),
    ("H100", "hopper"), ("H800", "hopper"), ("H200", "hopper"), ("B200", "blackwell"),
)

BANDWIDTH_EFFICIENCY = 0.8  # achieved fraction of HBM and link bandwidth (STREAM, nccl-tests busbw)
GEMM_REFERENCE_WIDTH = 4096  # per-GPU hidden width at which GEMMs reach the generation's MFU
GEMM_WIDTH_EXPONENT = 0.2  # narrower GEMMs (small models, wide tp) lose efficiency as (w/ref)^0.2
KERNEL_OVERHEAD_S_PER_LAYER = 160e-6  # ~40 kernel launches per layer fwd+bwd at ~4 us each
COLLECTIVE_LATENCY_S = 10e-6  # per hop of a tree/ring collective (NCCL small-message latency)
ACTIVATION_TRAFFIC_PASSES = 4  # saved activations: written fwd, read bwd, their grads written+read
LOGIT_TRAFFIC_BYTES_PER_ELEMENT = 12  # 16-bit logits, fp32 copy, fp32 grad: written and read
# Optimizer update is bandwidth bound: bytes touched per parameter it owns.
# adamw: read fp32 master, grad, m, v (16) + write master, m, v (12) + 16-bit weight copy (2) = 30
# sgd with momentum: read master, grad, momentum (12) + write master, momentum (8) + copy (2) = 22
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 30, "sgd": 22}


@dataclass(frozen=True)
class StepTime:
    """One step's time, split so that tests and the CLI can show where it goes."""

    compute_s: float  # pipelined compute incl. bubble and recompute (no communication)
    tensor_parallel_s: float  # tp all-reduces / sp all-gathers, on the critical path
    pipeline_s: float  # activation sends between stages
    data_parallel_s: float  # exposed gradient sync, ZeRO gathers (after overlap)
    optimizer_s: float
    bubble_fraction: float  # (p-1)/(m+p-1)
    model_flops: float  # 6N + attention FLOPs of the whole step, all GPUs (for MFU)

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.tensor_parallel_s + self.pipeline_s
                + self.data_parallel_s + self.optimizer_s)


def generation(gpu: GpuType) -> Generation:
    for prefix, name in GENERATION_OF_PREFIX:
        if gpu.name.startswith(prefix):
            return GENERATIONS[name]
    return DEFAULT_GENERATION


def inter_node_gbs(gpu: GpuType) -> float:
    """Network bandwidth per GPU between nodes: the node's NICs shared by its GPUs, at most PCIe."""
    return min(generation(gpu).network_gbs_per_node / gpu.typical_gpus_per_node, gpu.pcie_gbs)


def _ring_s(volume_factor: float, nbytes: float, ranks: int, gbs: float) -> float:
    """Time of a ring collective moving volume_factor * (n-1)/n * nbytes per GPU."""
    if ranks <= 1:
        return 0.0
    latency = COLLECTIVE_LATENCY_S * 2 * math.ceil(math.log2(ranks))
    return volume_factor * (ranks - 1) / ranks * nbytes / (gbs * GB * BANDWIDTH_EFFICIENCY) + latency


def model_flops_per_token(arch: ModelArch, seq_len: int) -> float:
    """Forward+backward FLOPs per token: 6 x matmul params + 12 L h s attention (PaLM's formula)."""
    matmul_params = arch.num_layers * arch.layer_params() + arch.vocab_size * arch.hidden_size
    return 6 * matmul_params + 12 * arch.num_layers * arch.hidden_size * seq_len


def step_time_breakdown(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan,
                        gpu: GpuType) -> StepTime:
    """The cost model; see the module docstring for the shape of the formula."""
    recipe, s, h = training.recipe, training.seq_len, arch.hidden_size
    gen = generation(gpu)
    tp, pp, dp, mb = plan.tp, plan.pp, plan.dp, plan.micro_batch
    micro_batches = max(1, -(-training.global_batch_size // (dp * mb)))
    tokens_mb = mb * s
    act_bytes = 4 if recipe.precision == "fp32" else 2  # bf16 on a GPU without bf16 runs as fp16
    grad_bytes = 4 if recipe.precision == "fp32" or recipe.grad_dtype == "fp32" else 2

    # Compute of one micro-batch on the slowest stage: its share of layers plus the lm head.
    layers = arch.num_layers / pp
    stage_params = layers * arch.layer_params() + arch.vocab_size * h
    matmul_fwd = 2 * stage_params * tokens_mb / tp
    attention_fwd = 4 * layers * h * s * tokens_mb / tp
    flops = 3 * (matmul_fwd + attention_fwd)
    if plan.recompute == "full":
        flops += matmul_fwd + attention_fwd
    elif plan.recompute == "selective":
        flops += attention_fwd
    rate = 1.0 if recipe.precision != "fp32" else gen.fp32_rate
    width = min(1.0, (h / tp) / GEMM_REFERENCE_WIDTH) ** GEMM_WIDTH_EXPONENT
    compute_bound_s = flops / (gpu.peak_tflops_16bit * 1e12 * rate * gen.mfu * width)
    # The same micro-batch as memory traffic (roofline): weights and grads, activations, logits.
    weight_traffic = stage_params / tp * (3 * act_bytes + 2 * grad_bytes)
    per_token_layer = 34 * h + (5 * arch.num_heads * s if recipe.attention == "eager" else 0)
    act_traffic = (ACTIVATION_TRAFFIC_PASSES * per_token_layer * layers * tokens_mb / tp
                   * act_bytes / 2)
    logit_traffic = LOGIT_TRAFFIC_BYTES_PER_ELEMENT * tokens_mb * arch.vocab_size / tp
    memory_bound_s = ((weight_traffic + act_traffic + logit_traffic)
                      / (gpu.mem_bandwidth_gbs * GB * BANDWIDTH_EFFICIENCY))
    overhead_s = KERNEL_OVERHEAD_S_PER_LAYER * math.ceil(layers) * (
        4 / 3 if plan.recompute == "full" else 1)
    micro_batch_s = max(compute_bound_s, memory_bound_s) + overhead_s

    # Tensor parallel: 2 all-reduces per layer forward, 2 backward, 2 more when recomputing all
    # (sequence parallel swaps each for an all-gather + reduce-scatter of the same volume).
    tp_ops = 4 + (2 if plan.recompute == "full" else 0)
    tp_s = tp_ops * math.ceil(layers) * _ring_s(2, tokens_mb * h * act_bytes, tp, gpu.intra_node_gbs)

    # Pipeline: one activation send forward and one gradient send back per micro-batch.
    node = gpu.typical_gpus_per_node
    pp_gbs = gpu.intra_node_gbs if plan.num_gpus <= node else inter_node_gbs(gpu)
    pp_s = 0.0 if pp == 1 else 2 * (tokens_mb * h * act_bytes / tp / (pp_gbs * GB * BANDWIDTH_EFFICIENCY)
                                    + COLLECTIVE_LATENCY_S)

    bubble = (pp - 1) / (micro_batches + pp - 1)
    pipelined_s = micro_batches + pp - 1  # 1F1B: (m + p - 1) micro-batch slots
    compute_s = pipelined_s * micro_batch_s

    # Data parallel, with tp innermost then dp (Megatron's rank order): the dp group stays inside
    # a node while tp * dp fits in one, else it crosses the network.
    dp_gbs = gpu.intra_node_gbs if tp * dp <= node else min(gpu.intra_node_gbs, inter_node_gbs(gpu))
    rank_params = arch.num_params() / (tp * pp)
    grads, weights = rank_params * grad_bytes, rank_params * act_bytes
    backward_s = micro_batch_s * 2 / 3  # the last micro-batch's backward hides bucketed syncs
    if plan.zero == 0:
        dp_s = max(0.0, _ring_s(2, grads, dp, dp_gbs) - backward_s)
    elif plan.zero == 1:
        dp_s = max(0.0, _ring_s(1, grads, dp, dp_gbs) - backward_s) + _ring_s(1, weights, dp, dp_gbs)
    elif plan.zero == 2:  # reduce-scatter every micro-batch, all-gather updated weights once
        dp_s = (micro_batches * max(0.0, _ring_s(1, grads, dp, dp_gbs) - backward_s)
                + _ring_s(1, weights, dp, dp_gbs))
    else:  # zero 3: gather weights for forward and backward, reduce-scatter grads, per micro-batch
        per_mb = _ring_s(2, weights, dp, dp_gbs) + _ring_s(1, grads, dp, dp_gbs)
        dp_s = micro_batches * max(0.0, per_mb - micro_batch_s)

    owned_params = rank_params / (dp if plan.zero >= 1 else 1)
    optimizer_s = (owned_params * OPTIMIZER_BYTES_PER_PARAM.get(recipe.optimizer, 30)
                   / (gpu.mem_bandwidth_gbs * GB * BANDWIDTH_EFFICIENCY))

    model_flops = model_flops_per_token(arch, s) * training.tokens_per_step
    return StepTime(
        compute_s=compute_s, tensor_parallel_s=pipelined_s * tp_s, pipeline_s=pipelined_s * pp_s,
        data_parallel_s=dp_s, optimizer_s=optimizer_s, bubble_fraction=bubble,
        model_flops=model_flops)


def step_time_s(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Estimated seconds per training step of `plan` on GPUs of type `gpu`."""
    return step_time_breakdown(arch, training, plan, gpu).total_s


def mfu(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Model FLOPs utilisation the estimate implies (for sanity checks against published MFU)."""
    t = step_time_breakdown(arch, training, plan, gpu)
    return t.model_flops / (t.total_s * plan.num_gpus * gpu.peak_tflops_16bit * 1e12)
