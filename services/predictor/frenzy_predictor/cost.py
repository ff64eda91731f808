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
from typing import NamedTuple

from frenzy.catalog.gpus import GpuType
from frenzy.catalog.models import ModelArch
from frenzy.domain import OPTIMIZER_MOMENT_BYTES, ParallelPlan, TrainingSpec

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

COMM_OVERLAP = 0.8  # at most this much of a transfer hides behind compute (SM/HBM contention)
BANDWIDTH_EFFICIENCY = 0.8  # achieved fraction of HBM and link bandwidth (STREAM, nccl-tests busbw)
GEMM_REFERENCE_WIDTH = 4096  # per-GPU hidden width at which GEMMs reach the generation's MFU
GEMM_WIDTH_EXPONENT = 0.2  # narrower GEMMs (small models, wide tp) lose efficiency as (w/ref)^0.2
KERNEL_OVERHEAD_S_PER_LAYER = 160e-6  # ~40 kernel launches per layer fwd+bwd at ~4 us each
COLLECTIVE_LATENCY_S = 10e-6  # per hop of a tree/ring collective (NCCL small-message latency)
ACTIVATION_TRAFFIC_PASSES = 4  # saved activations: written fwd, read bwd, their grads written+read
LOGIT_TRAFFIC_BYTES_PER_ELEMENT = 12  # 16-bit logits, fp32 copy, fp32 grad: written and read
# Optimizer update is bandwidth bound: bytes touched per parameter it owns: read the fp32 master,
# the fp32 grad and the moments, write the master and the moments, write the 16-bit weight copy.
# adamw: 16 + 12 + 2 = 30; sgd with momentum: 12 + 8 + 2 = 22.
OPTIMIZER_BYTES_PER_PARAM = {name: (4 + 4 + moments) + (4 + moments) + 2
                             for name, moments in OPTIMIZER_MOMENT_BYTES.items()}


class StepTime(NamedTuple):
    """One step's time, split so that tests and the CLI can show where it goes.

    (A NamedTuple rather than a frozen dataclass: the enumerator builds thousands of these.)
    """

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
    """The generation of the longest matching name prefix ("A100" wins over "A10")."""
    matches = [(len(prefix), name) for prefix, name in GENERATION_OF_PREFIX
               if gpu.name.startswith(prefix)]
    return GENERATIONS[max(matches)[1]] if matches else DEFAULT_GENERATION


def inter_node_gbs(gpu: GpuType) -> float:
    """Network bandwidth per GPU between nodes: the node's NICs shared by its GPUs, at most PCIe."""
    return min(generation(gpu).network_gbs_per_node / gpu.typical_gpus_per_node, gpu.pcie_gbs)


def _ring_s(volume_factor: float, nbytes: float, ranks: int, gbs: float) -> float:
    """Time of a ring collective moving volume_factor * (n-1)/n * nbytes per GPU."""
    if ranks <= 1:
        return 0.0
    latency = COLLECTIVE_LATENCY_S * 2 * math.ceil(math.log2(ranks))
    return volume_factor * (ranks - 1) / ranks * nbytes / (gbs * GB * BANDWIDTH_EFFICIENCY) + latency


def _exposed(comm_s: float, window_s: float) -> float:
    """Communication left on the critical path when it overlaps a compute window."""
    return max(comm_s - window_s, (1 - COMM_OVERLAP) * comm_s)


def model_flops_per_token(arch: ModelArch, seq_len: int) -> float:
    """Forward+backward FLOPs per token: 6 x matmul params + 12 L h s attention (PaLM's formula)."""
    # a mixture of experts runs top-k of its experts per token
    active = arch.layer_params() - arch.expert_layer_params() \
        + 3 * arch.hidden_size * arch.moe_ffn_hidden_size * arch.experts_per_token
    matmul_params = arch.num_layers * active + arch.vocab_size * arch.hidden_size
    return 6 * matmul_params + 12 * arch.num_layers * arch.hidden_size * seq_len


class CostModel:
    """The cost model of one job on one GPU type: job constants once, then cheap per-plan calls.

    The enumerator evaluates hundreds of plans per GPU type; the shape of the formula is in the
    module docstring.
    """

    def __init__(self, arch: ModelArch, training: TrainingSpec, gpu: GpuType):
        recipe = training.recipe
        self.arch, self.training, self.gpu = arch, training, gpu
        self.gen = generation(gpu)
        self.layer_params = arch.layer_params()
        self.num_params = arch.num_params()
        self.act_bytes = 4 if recipe.precision == "fp32" else 2  # bf16 without bf16 runs as fp16
        self.grad_bytes = 4 if recipe.precision == "fp32" or recipe.grad_dtype == "fp32" else 2
        rate = 1.0 if recipe.precision != "fp32" else self.gen.fp32_rate
        self.flops_per_s = gpu.peak_tflops_16bit * 1e12 * rate * self.gen.mfu
        self.hbm_bytes_per_s = gpu.mem_bandwidth_gbs * GB * BANDWIDTH_EFFICIENCY
        self.act_bytes_per_token_layer = 34 * arch.hidden_size + (
            5 * arch.num_heads * training.seq_len if recipe.attention == "eager" else 0)
        self.optimizer_bytes = OPTIMIZER_BYTES_PER_PARAM.get(recipe.optimizer, 30)
        self.inter_node_gbs = min(inter_node_gbs(gpu), gpu.intra_node_gbs)
        self.model_flops = model_flops_per_token(arch, training.seq_len) * training.tokens_per_step
        self._micro_batch_cache: dict[tuple, tuple[float, float, float]] = {}
        self._step_cache: dict[tuple, tuple[float, float, float, float]] = {}
        self._dp_cache: dict[tuple, tuple[float, float, float]] = {}

    def micro_batch_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str) -> tuple[float, float, float]:
        """(compute, tensor-parallel, pipeline-send) seconds of one micro-batch on the slowest stage.

        Memoised: plans that differ only in ZeRO stage share it.
        """
        key = (tp, pp, dp > 1 and tp * pp * dp > self.gpu.typical_gpus_per_node, mb, recompute)
        cached = self._micro_batch_cache.get(key)
        if cached is None:
            cached = self._micro_batch_cache[key] = self._micro_batch_s(tp, pp, dp, mb, recompute)
        return cached

    def _micro_batch_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str) -> tuple[float, float, float]:
        arch, gpu = self.arch, self.gpu
        s, h = self.training.seq_len, arch.hidden_size
        tokens_mb = mb * s
        act_bytes, grad_bytes = self.act_bytes, self.grad_bytes

        # Compute: the stage's share of layers plus the lm head (Megatron puts it on the last stage).
        layers = arch.num_layers / pp
        stage_params = layers * self.layer_params + arch.vocab_size * h
        matmul_fwd = 2 * stage_params * tokens_mb / tp
        attention_fwd = 4 * layers * h * s * tokens_mb / tp
        flops = 3 * (matmul_fwd + attention_fwd)
        if recompute == "full":
            flops += matmul_fwd + attention_fwd
        elif recompute == "selective":
            flops += attention_fwd
        width = min(1.0, (h / tp) / GEMM_REFERENCE_WIDTH) ** GEMM_WIDTH_EXPONENT
        compute_bound_s = flops / (self.flops_per_s * width)
        # The same micro-batch as memory traffic (roofline): weights and grads, activations, logits.
        weight_traffic = stage_params / tp * (3 * act_bytes + 2 * grad_bytes)
        act_traffic = (ACTIVATION_TRAFFIC_PASSES * self.act_bytes_per_token_layer * layers
                       * tokens_mb / tp * act_bytes / 2)
        logit_traffic = LOGIT_TRAFFIC_BYTES_PER_ELEMENT * tokens_mb * arch.vocab_size / tp
        memory_bound_s = (weight_traffic + act_traffic + logit_traffic) / self.hbm_bytes_per_s
        overhead_s = KERNEL_OVERHEAD_S_PER_LAYER * math.ceil(layers) * (
            4 / 3 if recompute == "full" else 1)
        compute_s = max(compute_bound_s, memory_bound_s) + overhead_s

        # Tensor parallel: 2 all-reduces per layer forward, 2 backward, 2 more when recomputing
        # all (sequence parallel swaps each for all-gather + reduce-scatter of the same volume).
        tp_s = 0.0
        if tp > 1:
            tp_ops = 6 if recompute == "full" else 4
            tp_s = tp_ops * math.ceil(layers) * _ring_s(2, tokens_mb * h * act_bytes, tp,
                                                        gpu.intra_node_gbs)
        # Pipeline: one activation send forward and one gradient send back per micro-batch.
        pp_s = 0.0
        if pp > 1:
            on_one_node = tp * pp * dp <= gpu.typical_gpus_per_node
            pp_gbs = gpu.intra_node_gbs if on_one_node else self.inter_node_gbs
            pp_s = 2 * (tokens_mb * h * act_bytes / tp / (pp_gbs * GB * BANDWIDTH_EFFICIENCY)
                        + COLLECTIVE_LATENCY_S)
        return compute_s, tp_s, pp_s

    def pipeline_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str) -> float:
        """Pipelined part of a step: a lower bound on any plan with these values (any ZeRO stage)."""
        compute_s, tp_s, pp_s = self.micro_batch_s(tp, pp, dp, mb, recompute)
        slots = self._micro_batches(dp, mb) + pp - 1
        return slots * (compute_s + tp_s + pp_s)

    def breakdown(self, plan: ParallelPlan) -> StepTime:
        return self.breakdown_of(plan.tp, plan.pp, plan.dp, plan.zero, plan.micro_batch,
                                 plan.recompute)

    def step_s(self, tp: int, pp: int, dp: int, zero: int, mb: int, recompute: str) -> float:
        """`breakdown_of(...).total_s`, memoised (the enumerator's hot path: no plan objects)."""
        return self.step_s_by_zero(tp, pp, dp, mb, recompute)[zero]

    def step_s_by_zero(self, tp: int, pp: int, dp: int, mb: int,
                       recompute: str) -> tuple[float, float, float, float]:
        """Step time of ZeRO stages 0-3, memoised: they share everything but the data-parallel
        and optimizer terms. The same helpers and order of additions as `breakdown_of`, so the
        two agree to the last bit."""
        key = (tp, pp, dp, mb, recompute)
        cached = self._step_cache.get(key)
        if cached is None:
            micro_batches = self._micro_batches(dp, mb)
            slots = micro_batches + pp - 1
            compute_s, tp_s, pp_s = self.micro_batch_s(tp, pp, dp, mb, recompute)
            pipelined_s = slots * compute_s + slots * tp_s + slots * pp_s
            dp_s = self._data_parallel_s(tp, pp, dp, micro_batches, compute_s)
            optimizer_s = self._optimizer_s(tp, pp, dp)
            cached = self._step_cache[key] = (
                pipelined_s + dp_s[0] + optimizer_s[0], pipelined_s + dp_s[1] + optimizer_s[1],
                pipelined_s + dp_s[2] + optimizer_s[2], pipelined_s + dp_s[3] + optimizer_s[3])
        return cached

    def breakdown_of(self, tp: int, pp: int, dp: int, zero: int, mb: int,
                     recompute: str) -> StepTime:
        micro_batches = self._micro_batches(dp, mb)
        slots = micro_batches + pp - 1  # 1F1B: (m + p - 1) micro-batch slots, (p - 1) idle
        compute_s, tp_s, pp_s = self.micro_batch_s(tp, pp, dp, mb, recompute)
        return StepTime(
            compute_s=slots * compute_s, tensor_parallel_s=slots * tp_s, pipeline_s=slots * pp_s,
            data_parallel_s=self._data_parallel_s(tp, pp, dp, micro_batches, compute_s)[zero],
            optimizer_s=self._optimizer_s(tp, pp, dp)[zero],
            bubble_fraction=(pp - 1) / slots, model_flops=self.model_flops)

    def _micro_batches(self, dp: int, mb: int) -> int:
        """Micro-batches per step (gradient accumulation), at least one."""
        return max(1, -(-self.training.global_batch_size // (dp * mb)))

    def _data_parallel_s(self, tp: int, pp: int, dp: int, micro_batches: int,
                         compute_s: float) -> tuple[float, float, float, float]:
        """Exposed data-parallel / ZeRO communication of one step, for ZeRO stages 0-3.

        Bucketed syncs overlap the backward pass, but at most COMM_OVERLAP of any transfer
        hides behind compute (`compute_s` is one micro-batch's).
        """
        if dp <= 1:
            return (0.0, 0.0, 0.0, 0.0)
        reduce_grads_s, scatter_grads_s, gather_weights_s = self._dp_collectives_s(tp, pp, dp)
        backward_s = compute_s * 2 / 3  # the last micro-batch's backward hides the grad sync
        scatter_s = _exposed(scatter_grads_s, backward_s)
        return (
            _exposed(reduce_grads_s, backward_s),  # 0: all-reduce grads
            scatter_s + gather_weights_s,  # 1: reduce-scatter grads, all-gather updated weights
            micro_batches * scatter_s + gather_weights_s,  # 2: reduce-scatter every micro-batch
            # 3: per micro-batch, gather weights for fwd and bwd, reduce-scatter grads
            micro_batches * _exposed(2 * gather_weights_s + scatter_grads_s, compute_s))

    def _optimizer_s(self, tp: int, pp: int, dp: int) -> tuple[float, float, float, float]:
        """The optimizer update, bandwidth bound, over the parameters a rank owns (all of its
        stage's with ZeRO-0, a 1/dp shard from ZeRO-1 on), for ZeRO stages 0-3."""
        stage_params = self.num_params / (tp * pp)
        replicated = stage_params * self.optimizer_bytes / self.hbm_bytes_per_s
        sharded = stage_params / dp * self.optimizer_bytes / self.hbm_bytes_per_s
        return (replicated, sharded, sharded, sharded)

    def _dp_collectives_s(self, tp: int, pp: int, dp: int) -> tuple[float, float, float]:
        """(all-reduce grads, reduce-scatter grads, all-gather 16-bit weights) over the dp group.

        Data parallel with tp innermost, then dp (Megatron's rank order): the group stays
        inside a node while tp * dp fits in one, else it crosses the network.
        """
        key = (tp, pp, dp)
        cached = self._dp_cache.get(key)
        if cached is None:
            gbs = self.gpu.intra_node_gbs if tp * dp <= self.gpu.typical_gpus_per_node \
                else self.inter_node_gbs
            rank_params = self.num_params / (tp * pp)
            grads, weights = rank_params * self.grad_bytes, rank_params * self.act_bytes
            cached = self._dp_cache[key] = (_ring_s(2, grads, dp, gbs), _ring_s(1, grads, dp, gbs),
                                            _ring_s(1, weights, dp, gbs))
        return cached

    def step_time_s(self, plan: ParallelPlan) -> float:
        return self.breakdown(plan).total_s


def step_time_breakdown(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan,
                        gpu: GpuType) -> StepTime:
    return CostModel(arch, training, gpu).breakdown(plan)


def step_time_s(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Estimated seconds per training step of `plan` on GPUs of type `gpu`."""
    return step_time_breakdown(arch, training, plan, gpu).total_s


def mfu(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Model FLOPs utilisation the estimate implies (for sanity checks against published MFU)."""
    t = step_time_breakdown(arch, training, plan, gpu)
    return t.model_flops / (t.total_s * plan.num_gpus * gpu.peak_tflops_16bit * 1e12)
