"""Step time of a parallel plan on a GPU type: a roofline for compute plus a ring model for comms.

One training step on the slowest pipeline stage of one GPU is

    step = (m + p - 1) * (micro-batch compute + tensor-parallel all-reduces + pipeline sends
                          + context-parallel K/V ring + expert-parallel all-to-alls)
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
    context_parallel_s: float = 0.0  # exposed K/V ring exchanges of attention (cp > 1)
    expert_parallel_s: float = 0.0  # token dispatch / combine all-to-alls of MoE layers (ep > 1)

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.tensor_parallel_s + self.pipeline_s
                + self.data_parallel_s + self.optimizer_s
                + self.context_parallel_s + self.expert_parallel_s)


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

    def __init__(self, arch: ModelArch, training: TrainingSpec, gpu: GpuType, ep: int = 1):
        recipe = training.recipe
        self.arch, self.training, self.gpu = arch, training, gpu
        self.ep = ep  # expert parallelism of every plan costed here (as plans.MemoryTable's)
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
        self._micro_batch_cache: dict[tuple, tuple[float, float, float, float, float]] = {}
        self._step_cache: dict[tuple, tuple[float, float, float, float]] = {}
        self._dp_cache: dict[tuple, tuple[float, float, float]] = {}

    def micro_batch_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str,
                      cp: int = 1) -> tuple[float, float, float, float, float]:
        """(compute, tensor-parallel, pipeline-send, context-parallel, expert-parallel) seconds
        of one micro-batch on the slowest stage.

        Memoised: plans that differ only in ZeRO stage share it.
        """
        key = (tp, pp, dp > 1 and tp * pp * dp * cp > self.gpu.typical_gpus_per_node, mb,
               recompute, cp)
        cached = self._micro_batch_cache.get(key)
        if cached is None:
            cached = self._micro_batch_cache[key] = self._micro_batch_s(tp, pp, dp, mb, recompute, cp)
        return cached

    def _micro_batch_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str,
                       cp: int) -> tuple[float, float, float, float, float]:
        arch, gpu = self.arch, self.gpu
        s, h = self.training.seq_len, arch.hidden_size
        tokens_mb = mb * s // cp  # a context-parallel rank holds s / cp tokens of each sequence
        act_bytes, grad_bytes = self.act_bytes, self.grad_bytes

        # Compute: the stage's share of layers plus the lm head (Megatron puts it on the last stage).
        # Attention: each rank's s / cp queries see the whole sequence (cp > 1: the K/V ring).
        # An uneven split (a fixed plan; the search offers even ones only) runs at its heaviest
        # stage's pace: ceil(layers / pp), as the reference trainer's and torchtitan's rules put
        # at most one layer more on a stage (frenzy_predictor.pipeline_split).
        layers = float(-(-arch.num_layers // pp))  # a float, as num_layers / pp was
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
            on_one_node = tp * pp * dp * cp <= gpu.typical_gpus_per_node
            pp_gbs = gpu.intra_node_gbs if on_one_node else self.inter_node_gbs
            pp_s = 2 * (tokens_mb * h * act_bytes / tp / (pp_gbs * GB * BANDWIDTH_EFFICIENCY)
                        + COLLECTIVE_LATENCY_S)
        cp_s = self._context_parallel_s(tp, cp, layers, tokens_mb, recompute,
                                        3 * attention_fwd / (self.flops_per_s * width))
        ep_s = self._expert_parallel_s(tp, cp, layers, tokens_mb, recompute)
        return compute_s, tp_s, pp_s, cp_s, ep_s

    def _group_gbs(self, span: int) -> float:
        """Link bandwidth of a group whose ranks lie within `span` consecutive GPUs (Megatron's
        rank order tp-cp-ep-dp-pp, megatron/core/parallel_state.py): NVLink while the span
        fits a node, else the network."""
        return self.gpu.intra_node_gbs if span <= self.gpu.typical_gpus_per_node else self.inter_node_gbs

    def _context_parallel_s(self, tp: int, cp: int, layers: float, tokens_mb: int,
                            recompute: str, attention_s: float) -> float:
        """Exposed K/V ring of context parallelism, per micro-batch (Megatron-LM
        docs/user-guide/features/context_parallel.md; Transformer Engine's
        AttnFuncWithCPAndKVP2P): in each layer's forward every rank passes its K and V chunk
        (tokens/cp x kv_dim/tp each) around the ring, cp - 1 hops; backward passes K, V and
        their gradients (twice the bytes); full recompute repeats the forward. Each hop
        overlaps the attention of the chunk before it, so the ring hides behind the layer's
        attention compute (`attention_s`, fwd + bwd), at most COMM_OVERLAP of it."""
        if cp <= 1:
            return 0.0
        passes = 4 if recompute == "full" else 3  # forward, backward (K/V + dK/dV), recompute
        chunk_bytes = 2 * tokens_mb * self.arch.kv_dim / tp * self.act_bytes  # K and V
        hop_s = chunk_bytes / (self._group_gbs(tp * cp) * GB * BANDWIDTH_EFFICIENCY) + COLLECTIVE_LATENCY_S
        per_layer_s = passes * (cp - 1) * hop_s
        return math.ceil(layers) * _exposed(per_layer_s, attention_s / layers)

    def _expert_parallel_s(self, tp: int, cp: int, layers: float, tokens_mb: int,
                           recompute: str) -> float:
        """Token all-to-alls of expert parallelism, per micro-batch (Megatron-LM
        moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.token_dispatch / token_combine):
        every MoE layer dispatches its tokens' top-k copies to the experts' ranks and combines
        the outputs back, in forward and again (their gradients) in backward, and once more
        forward under full recompute. Each all-to-all moves tokens x top-k x hidden 16-bit
        values per rank (sequence parallel: tokens / tp), (ep - 1) / ep of it leaving the rank.
        The experts wait for their tokens: on the critical path (Megatron overlaps it only
        with --overlap-moe-expert-parallel-comm, off by default)."""
        ep = self.ep
        if ep <= 1 or not self.arch.is_moe:
            return 0.0
        all_to_alls = 6 if recompute == "full" else 4
        routed_bytes = tokens_mb * self.arch.experts_per_token * self.arch.hidden_size \
            * self.act_bytes / tp
        return math.ceil(layers) * all_to_alls * _ring_s(1, routed_bytes, ep,
                                                         self._group_gbs(tp * cp * ep))

    def pipeline_s(self, tp: int, pp: int, dp: int, mb: int, recompute: str, cp: int = 1) -> float:
        """Pipelined part of a step: a lower bound on any plan with these values (any ZeRO stage)."""
        compute_s, tp_s, pp_s, cp_s, ep_s = self.micro_batch_s(tp, pp, dp, mb, recompute, cp)
        slots = self._micro_batches(dp, mb) + pp - 1
        return slots * (compute_s + tp_s + pp_s + cp_s + ep_s)

    def breakdown(self, plan: ParallelPlan) -> StepTime:
        return self.breakdown_of(plan.tp, plan.pp, plan.dp, plan.zero, plan.micro_batch,
                                 plan.recompute, plan.cp)

    def step_s(self, tp: int, pp: int, dp: int, zero: int, mb: int, recompute: str,
               cp: int = 1) -> float:
        """`breakdown_of(...).total_s`, memoised (the enumerator's hot path: no plan objects)."""
        return self.step_s_by_zero(tp, pp, dp, mb, recompute, cp)[zero]

    def step_s_by_zero(self, tp: int, pp: int, dp: int, mb: int, recompute: str,
                       cp: int = 1) -> tuple[float, float, float, float]:
        """Step time of ZeRO stages 0-3, memoised: they share everything but the data-parallel
        and optimizer terms. The same helpers and order of additions as `breakdown_of`, so the
        two agree to the last bit."""
        key = (tp, pp, dp, mb, recompute, cp)
        cached = self._step_cache.get(key)
        if cached is None:
            micro_batches = self._micro_batches(dp, mb)
            slots = micro_batches + pp - 1
            compute_s, tp_s, pp_s, cp_s, ep_s = self.micro_batch_s(tp, pp, dp, mb, recompute, cp)
            pipelined_s = slots * compute_s + slots * tp_s + slots * pp_s
            dp_s = self._data_parallel_s(tp, pp, dp, micro_batches, compute_s, cp)
            optimizer_s = self._optimizer_s(tp, pp, dp, cp)
            cp_ep = (slots * cp_s, slots * ep_s)
            cached = self._step_cache[key] = tuple(
                pipelined_s + dp_s[z] + optimizer_s[z] + cp_ep[0] + cp_ep[1] for z in range(4))
        return cached

    def breakdown_of(self, tp: int, pp: int, dp: int, zero: int, mb: int,
                     recompute: str, cp: int = 1) -> StepTime:
        micro_batches = self._micro_batches(dp, mb)
        slots = micro_batches + pp - 1  # 1F1B: (m + p - 1) micro-batch slots, (p - 1) idle
        compute_s, tp_s, pp_s, cp_s, ep_s = self.micro_batch_s(tp, pp, dp, mb, recompute, cp)
        return StepTime(
            compute_s=slots * compute_s, tensor_parallel_s=slots * tp_s, pipeline_s=slots * pp_s,
            data_parallel_s=self._data_parallel_s(tp, pp, dp, micro_batches, compute_s, cp)[zero],
            optimizer_s=self._optimizer_s(tp, pp, dp, cp)[zero],
            bubble_fraction=(pp - 1) / slots, model_flops=self.model_flops,
            context_parallel_s=slots * cp_s, expert_parallel_s=slots * ep_s)

    def _micro_batches(self, dp: int, mb: int) -> int:
        """Micro-batches per step (gradient accumulation), at least one."""
        return max(1, -(-self.training.global_batch_size // (dp * mb)))

    def _data_parallel_s(self, tp: int, pp: int, dp: int, micro_batches: int,
                         compute_s: float, cp: int = 1) -> tuple[float, float, float, float]:
        """Exposed data-parallel / ZeRO communication of one step, for ZeRO stages 0-3.

        Bucketed syncs overlap the backward pass, but at most COMM_OVERLAP of any transfer
        hides behind compute (`compute_s` is one micro-batch's). Context-parallel ranks hold
        the same weights: gradients reduce (and ZeRO shards) over dp x cp ranks.
        """
        if dp * cp <= 1:
            return (0.0, 0.0, 0.0, 0.0)
        reduce_grads_s, scatter_grads_s, gather_weights_s = self._dp_collectives_s(tp, pp, dp, cp)
        backward_s = compute_s * 2 / 3  # the last micro-batch's backward hides the grad sync
        scatter_s = _exposed(scatter_grads_s, backward_s)
        return (
            _exposed(reduce_grads_s, backward_s),  # 0: all-reduce grads
            scatter_s + gather_weights_s,  # 1: reduce-scatter grads, all-gather updated weights
            micro_batches * scatter_s + gather_weights_s,  # 2: reduce-scatter every micro-batch
            # 3: per micro-batch, gather weights for fwd and bwd, reduce-scatter grads
            micro_batches * _exposed(2 * gather_weights_s + scatter_grads_s, compute_s))

    def _rank_params(self, tp: int, pp: int) -> float:
        """Parameters one rank holds: its tp x pp share, without the routed experts that expert
        parallelism puts on the other ep - 1 ranks of its group."""
        other_experts = self.arch.num_layers * self.arch.expert_layer_params() * (self.ep - 1) / self.ep
        return (self.num_params - other_experts) / (tp * pp) if self.ep > 1 \
            else self.num_params / (tp * pp)

    def _optimizer_s(self, tp: int, pp: int, dp: int, cp: int = 1) -> tuple[float, float, float, float]:
        """The optimizer update, bandwidth bound, over the parameters a rank owns (all of its
        stage's with ZeRO-0, a 1/(dp x cp) shard from ZeRO-1 on), for ZeRO stages 0-3."""
        stage_params = self._rank_params(tp, pp)
        replicated = stage_params * self.optimizer_bytes / self.hbm_bytes_per_s
        sharded = stage_params / (dp * cp) * self.optimizer_bytes / self.hbm_bytes_per_s
        return (replicated, sharded, sharded, sharded)

    def _dp_collectives_s(self, tp: int, pp: int, dp: int, cp: int = 1) -> tuple[float, float, float]:
        """(all-reduce grads, reduce-scatter grads, all-gather 16-bit weights) over the dp x cp
        group (Megatron's data_parallel_group_with_cp).

        Data parallel with tp (and cp) innermost, then dp (Megatron's rank order): the group
        stays inside a node while tp x cp x dp fits in one, else it crosses the network.
        """
        key = (tp, pp, dp, cp)
        cached = self._dp_cache.get(key)
        if cached is None:
            gbs = self._group_gbs(tp * cp * dp)
            rank_params = self._rank_params(tp, pp)
            grads, weights = rank_params * self.grad_bytes, rank_params * self.act_bytes
            ranks = dp * cp
            cached = self._dp_cache[key] = (_ring_s(2, grads, ranks, gbs), _ring_s(1, grads, ranks, gbs),
                                            _ring_s(1, weights, ranks, gbs))
        return cached

    def step_time_s(self, plan: ParallelPlan) -> float:
        return self.breakdown(plan).total_s


def step_time_breakdown(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan,
                        gpu: GpuType) -> StepTime:
    return CostModel(arch, training, gpu, plan.ep).breakdown(plan)


def step_time_s(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Estimated seconds per training step of `plan` on GPUs of type `gpu`."""
    return step_time_breakdown(arch, training, plan, gpu).total_s


def mfu(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan, gpu: GpuType) -> float:
    """Model FLOPs utilisation the estimate implies (for sanity checks against published MFU)."""
    t = step_time_breakdown(arch, training, plan, gpu)
    return t.model_flops / (t.total_s * plan.num_gpus * gpu.peak_tflops_16bit * 1e12)
