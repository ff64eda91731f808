"""MARP's analytical per-rank peak memory of one training step (docs/marp-memory.md).

Written after Megatron-LM's `theoretical_memory_usage`: one small function per term, each named
after the paper it comes from, all pure integer arithmetic (a call takes a few microseconds).
The training step it describes is the reference recipe (docs/recipe.md,
frenzy_trainer.recipe); the CPU profiler (frenzy_predictor.profiler) measures that same step,
and bench/marp_accuracy.py keeps the two within 2%.

Terms, per rank:
  parameters        16-bit weights (ZeRO-0/1); FSDP's gathered 16-bit weights (ZeRO-2/3)
  gradients         persistent fp32 (or 16-bit) grad buffer; sharded for ZeRO-2/3
  optimizer_states  fp32 master weights + AdamW moments (Rajbhandari et al. 2020, "ZeRO")
  activations       saved for backward (Korthikanti et al. 2022, adapted to this model)
  logits_loss       fp32 logits, log-softmax and their gradients at the start of backward
  temporaries       other transients at the peak (optimizer step, FSDP buffers)
  pipeline_buffers  torch.distributed.pipelining's receive buffers and cached stage outputs
                    (the reference trainer's pipelines; see "the reference trainer's TP x PP x DP")
  framework_overhead  CUDA context, NCCL buffers, allocator fragmentation (not tensors)

Three peaks, named for what they compare with (docs/marp-memory.md, "Three peaks"):
  peak_allocated_bytes  torch.cuda.max_memory_allocated (the tensors above)
  peak_reserved_bytes   torch.cuda.max_memory_reserved (+ the caching allocator's slack)
  device_peak_bytes     what the device must hold (+ CUDA context, NCCL): decides a fit
Pipelines: each stage holds the layers of its stack's own split (frenzy_predictor.pipeline_split,
uneven when pp does not divide the layers); the per-rank peak is the largest stage's, each with
its own layers, in-flight micro-batches and end modules.
`framework` picks the recipe profile: "frenzy" (this module, the reference trainer) or another
training stack's (frenzy_predictor.stacks: megatron, torchtitan, deepspeed, hf).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from frenzy.catalog.models import ModelArch
from frenzy.domain import FRAMEWORKS, MAX_SEQ_LEN, OPTIMIZER_MOMENT_BYTES, ParallelPlan, Recipe
from frenzy_predictor.pipeline_split import PipelineSplit, even_split, reference_split

GIB = 1024**3
MIB = 1024**2
MAX_MICRO_BATCH = 65_536
ALLOC_ROUND_BYTES = 512  # CUDA caching allocator block granularity

# Framework overhead (not tensors; added to peak_tensor_bytes to get peak_bytes). See docs.
CUDA_CONTEXT_BYTES = 768 * MIB  # context + cuBLAS/cuDNN workspaces, typical on A100/H100
NCCL_BUFFER_BYTES = 512 * MIB  # NCCL channels and proxy buffers, when more than one GPU
FRAGMENTATION_FRACTION = 0.05  # caching-allocator reserved-but-unallocated margin

INT64_BYTES = 4 * 2
FP32_BYTES = 4
# FSDP: a block's 16-bit weight gradients live at the peak of its backward, in blocks
# (profiled), (without, with) full recompute.
FSDP_GRADS_IN_FLIGHT = (1.0, 0.5)




@dataclass(frozen=True)
class MemoryEstimate:
    peak_allocated_bytes: int  # compares with torch.cuda.max_memory_allocated
    peak_reserved_bytes: int  # compares with torch.cuda.max_memory_reserved
    device_peak_bytes: int  # plus CUDA context and NCCL buffers: decides whether a plan fits
    breakdown: dict[str, int] = field(default_factory=dict)
    # backward (at the loss), layer_backward (the last layer's), layer_{i}_backward (FSDP),
    # embedding_backward, root_reduce_scatter (FSDP end of backward), overflow_check (DeepSpeed
    # ZeRO-3's fp16 check at the step's start), optimizer
    peak_phase: str = ""
    peak_stage: int = 0  # pipeline stage holding the per-rank peak
    framework: str = "frenzy"  # the recipe profile that produced it
    stage_layers: tuple[int, ...] = ()  # transformer layers per pipeline stage (the stack's split)

    @property
    def peak_tensor_bytes(self) -> int:
        """Alias of peak_allocated_bytes (its name before the three peaks)."""
        return self.peak_allocated_bytes

    @property
    def peak_bytes(self) -> int:
        """Alias of device_peak_bytes (its name before the three peaks)."""
        return self.device_peak_bytes


def _r(nbytes: float) -> int:
    """Round one allocation up to the allocator's 512 B granularity."""
    n = int(nbytes)
    return -(-n // ALLOC_ROUND_BYTES) * ALLOC_ROUND_BYTES


def _act_bytes(recipe: Recipe) -> int:
    return 4 if recipe.precision == "fp32" else 2


# ---------------------------------------------------------------- model states (ZeRO paper)

def rank_layer_params(arch: ModelArch, plan: ParallelPlan) -> int:
    """Parameters of one layer a rank holds before tensor parallelism: expert parallelism
    (plan.ep) spreads a mixture-of-experts layer's routed experts over ep ranks."""
    if plan.ep == 1:
        return arch.layer_params()
    experts = arch.expert_layer_params()
    return arch.layer_params() - experts + experts // plan.ep


def expert_replica_params(arch: ModelArch, plan: ParallelPlan) -> int:
    """Parameters of one stage's tp rank held by another rank of the ep group: ZeRO shards
    experts over the dp / ep ranks that replicate them (Megatron's expert data-parallel
    group), so a rank's shard is the model's share over dp, not its own holding's."""
    if plan.ep == 1:
        return 0
    experts = arch.expert_layer_params() * (arch.num_layers // plan.pp)
    return -(-(experts - experts // plan.ep) // plan.tp)

def stage_params(arch: ModelArch, plan: ParallelPlan, stage: int, layers: int | None = None) -> int:
    """Parameters one tensor-parallel rank of pipeline `stage` holds (embedding first, head last).
    layers: the stage's transformer layers (its stack's pipeline split); None: an even split."""
    layers = arch.num_layers // plan.pp if layers is None else layers
    n = rank_layer_params(arch, plan) * layers
    if stage == 0:
        n += arch.embedding_params()
    if stage == plan.pp - 1:
        n += arch.head_params()
        if arch.tied_embeddings and plan.pp > 1:
            n += arch.vocab_size * arch.hidden_size  # last stage keeps its own copy of the tied weight
    return -(-n // plan.tp)


def model_state_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, params: int,
                      grads_live: bool) -> dict[str, int]:
    """Rajbhandari et al. 2020 (ZeRO): 2 + 4 + 12 bytes/param, the last terms divided by dp.

    ZeRO-0/1 (Megatron distributed optimizer for 1): 16-bit weights and a persistent fp32
    gradient buffer per rank, fp32 master weights and moments sharded for ZeRO-1.
    ZeRO-2/3 (FSDP2): fp32 sharded parameters are the masters; sharded fp32 grads exist only
    from the first backward of a step to the optimizer step (`grads_live`).
    """
    dp, zero = plan.dp, plan.zero
    fp32 = recipe.precision == "fp32"
    moments = OPTIMIZER_MOMENT_BYTES[recipe.optimizer]
    sharded = params + expert_replica_params(arch, plan)  # ZeRO divides the model's share by dp
    if zero <= 1:
        padded = -(-params // dp) * dp if zero == 1 else params
        shard = -(-sharded // dp) if zero == 1 else padded
        weight_b = 4 if fp32 else 2
        grad_b = 4 if (fp32 or recipe.grad_dtype == "fp32") else 2
        master = 0 if fp32 else _r(shard * 4)
        return {"parameters": _r(padded * weight_b), "gradients": _r(padded * grad_b),
                "optimizer_states": master + (moments // 4) * _r(shard * 4)}
    shard = -(-sharded // dp)
    return {"parameters": 0, "gradients": _r(shard * 4) if grads_live else 0,
            "optimizer_states": _r(shard * 4) + (moments // 4) * _r(shard * 4)}


def fsdp_gathered_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, blocks: int) -> int:
    """16-bit weights FSDP2 holds unsharded: the root module (embedding, final norm, head), which
    stays gathered through backward, plus `blocks` blocks (`fsdp_gathered_blocks`)."""
    e = _act_bytes(recipe)
    root = arch.embedding_params() + arch.head_params()
    return _r(-(-(root + blocks * rank_layer_params(arch, plan)) // plan.tp) * e)


def fsdp_gathered_blocks(plan: ParallelPlan, block: int) -> int:
    """Blocks gathered while block `block` (0 = first in forward) runs backward. ZeRO-2
    (reshard_after_forward=False) keeps each block gathered from forward until its own backward
    is done (FSDP2 reshards after backward): block + 1 of them. ZeRO-3 gathers one at a time (the
    last block is already gathered, prefetched, when the loss gradient starts)."""
    return block + 1 if plan.zero == 2 else 1


# ---------------------------------------------------------------- activations (Korthikanti 2022)

def korthikanti_layer_activation_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                       seq_len: int, recompute: str | None = None, *,
                                       gathered_norm_outputs: bool = False) -> int:
    """Bytes one transformer layer saves for backward, per micro-batch (Korthikanti et al. 2022).

    Korthikanti's 34sbh + 5as^2b, re-derived for this model (docs/marp-memory.md):
      replicated across tp unless sequence parallel: both norm inputs and outputs (4h),
        fp32 norm statistics, residual dropout masks (1 byte);
      split across tp: q,k,v (gpt2 3h; llama h + 2 kv), attention output (h), MLP
        (gpt2: 2f; llama SwiGLU: 4f), flash logsumexp (fp32, a per token) or eager
        softmax output (a*s per token) and the s x s causal mask (1 byte).
    gathered_norm_outputs: under sequence parallelism the linears after each norm save their
      all-gathered, whole-sequence input (DTensor's PrepareModuleInput gathers before them),
      where Megatron saves the norm's 1/tp slice and gathers it again in backward.
    """
    s, b, t = seq_len, plan.micro_batch, plan.tp
    h, a, f, kv = arch.hidden_size, arch.num_heads, arch.active_ffn_size, arch.kv_dim
    q = arch.q_dim
    e, p = _act_bytes(recipe), recipe.dropout
    tokens = s * b
    rep_div = t if plan.sequence_parallel else 1
    gpt2 = arch.family == "gpt2"
    norm_stats = 2 * (2 if gpt2 else 1) * FP32_BYTES  # per token: LayerNorm mean+rstd, RMSNorm rstd

    recompute = plan.recompute if recompute is None else recompute
    if recompute == "full":  # only the block input is kept
        return _r(tokens * h * e // rep_div)

    replicated = [tokens * h * e] * 4 + [tokens * norm_stats // 2] * 2
    gathered = []  # saved whole even under sequence parallelism
    if gathered_norm_outputs and plan.sequence_parallel:
        replicated, gathered = [tokens * h * e] * 2 + replicated[4:], [tokens * h * e] * 2
    if p > 0:
        replicated += [tokens * h] * 2  # residual dropout masks (bool)
    eager = recipe.attention == "eager"
    qkv = [tokens * (q + 2 * kv) * e // t] if gpt2 else \
        [tokens * q * e // t, tokens * kv * e // t, tokens * kv * e // t]
    if eager and kv != q and not gpt2:
        qkv = [tokens * q * e // t] * 3  # k, v repeated to all heads
    sharded = qkv + [tokens * q * e // t]  # attention output, saved by o_proj
    sharded += [tokens * f * e // t] * (2 if gpt2 else 4)
    replicated += moe_dispatch_activation_bytes(arch, recipe, tokens)
    if recompute != "selective":
        if eager:
            scores = b * (a // t) * s * s
            sharded += [scores * e, s * s]  # softmax output, causal mask
            if p > 0:
                sharded += [scores, scores * e]  # attention dropout mask and output
        else:
            sharded += [b * (a // t) * s * FP32_BYTES]  # flash logsumexp
    return sum(_r(x // rep_div) for x in replicated) + sum(_r(x) for x in sharded + gathered)


def moe_dispatch_activation_bytes(arch: ModelArch, recipe: Recipe, tokens: int) -> list[int]:
    """What a mixture-of-experts layer saves beyond its experts' MLPs (whose SwiGLU tensors the
    MLP term counts at width active_ffn_size): the router's fp32 logits and softmax
    (tokens x experts each), the top-k permuted copies of the tokens the experts' first
    matmuls keep, and the experts' outputs the weighted combine keeps (Megatron
    moe/token_dispatcher.py permute/unpermute; HF MixtralSparseMoeBlock index_select/index_add).
    Balanced routing: each rank's experts see tokens x top-k rows whatever ep is."""
    if not arch.is_moe:
        return []
    e, k = _act_bytes(recipe), arch.experts_per_token
    return [tokens * arch.num_experts * FP32_BYTES] * 2 + [k * tokens * arch.hidden_size * e] * 2


def embedding_head_activation_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                    seq_len: int, first: bool, last: bool) -> int:
    """Saved outside the layers: embedding dropout mask (first stage); final norm in/out (last)."""
    tokens, h, e = seq_len * plan.micro_batch, arch.hidden_size, _act_bytes(recipe)
    total = 0
    if first and recipe.dropout > 0:
        total += _r(tokens * h)
    if last:
        stats = (2 if arch.family == "gpt2" else 1) * FP32_BYTES
        total += 2 * _r(tokens * h * e) + _r(tokens * stats)
    return total


def logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
                      vocab: int | None = None) -> int:
    """fp32 cross-entropy at the start of backward: saved log-softmax, its gradient and the
    logits gradient, three fp32 tokens x vocab/tp tensors (Megatron casts logits to fp32).
    vocab: the logits' width on a rank, when not vocab/tp."""
    tokens = seq_len * plan.micro_batch
    width = -(-arch.vocab_size // plan.tp) if vocab is None else vocab
    return 3 * _r(tokens * width * FP32_BYTES)


def input_bytes(seq_len: int, plan: ParallelPlan, grad_accum: int) -> int:
    """int64 input ids and labels of every micro-batch of the step (they are made up front)."""
    return 2 * grad_accum * _r(seq_len * plan.micro_batch * INT64_BYTES)


def layer_backward_transient_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                   seq_len: int) -> tuple[int, int]:
    """Extra bytes while the last layer runs backward: (MLP phase, attention phase).

    Measured on the profiler (docs/marp-memory.md, "layer backward"): MLP gradients in flight
    (gpt2 ~1 f, SwiGLU ~3 f per token; with full recompute the recomputed layer is live, which
    `estimate_memory` adds, and ~0.75 f / 1.25 f), and for eager attention the s x s gradients
    of softmax (2 b a s^2, 3 with dropout; ~1.15 / 1.8 under full recompute, measured).
    """
    s, b, t, e = seq_len, plan.micro_batch, plan.tp, _act_bytes(recipe)
    tokens, f, a = s * b, arch.active_ffn_size, arch.num_heads
    full = plan.recompute == "full"
    gpt2 = arch.family == "gpt2"
    mlp_factor = (0.75 if gpt2 else 1.25) if full else (1.0 if gpt2 else 3.0)
    mlp = int(mlp_factor * tokens * f * e / t)
    attn = 0
    if recipe.attention == "eager":
        dropout = recipe.dropout > 0
        attn_factor = (1.8 if dropout else 1.15) if full else (3.0 if dropout else 2.0)
        attn = int(attn_factor * b * (a // t) * s * s * e)
    return mlp, attn


def mlp_saved_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int) -> int:
    """The MLP half of a layer's saved activations (already freed when attention runs backward)."""
    tokens, e, t = seq_len * plan.micro_batch, _act_bytes(recipe), plan.tp
    f, h = arch.active_ffn_size, arch.hidden_size
    return 2 * tokens * h * e + (2 if arch.family == "gpt2" else 4) * tokens * f * e // t


def fsdp_block_backward_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, layers: int,
                              blocks: list[int]) -> list[int]:
    """FSDP2 buffers while each of `blocks` (0 = first in forward) runs backward, beside its weights:

    - ZeRO-3: the next block's all-gather output, prefetched (none while block 0 runs);
    - the previous block's reduce-scatter input, which FSDP2 holds until this block's
      post-backward (none while the last block, the first to run backward, runs);
    - this block's 16-bit weight gradients so far (profiled: ~1 block at the peak, which comes
      late in the block; ~0.5 under full recompute, whose peak comes sooner, after the recompute).
    """
    if plan.zero < 2:
        return [0] * len(blocks)
    weights = -(-rank_layer_params(arch, plan) // plan.tp) * _act_bytes(recipe)
    prefetch = _r(weights) if plan.zero == 3 else 0
    held = fsdp_block_reduce_scatter_input_bytes(arch, recipe, plan)
    grads = int(FSDP_GRADS_IN_FLIGHT[plan.recompute == "full"] * weights)
    return [(prefetch if i > 0 else 0) + (held if i < layers - 1 else 0) + grads for i in blocks]


def pending_embedding_grad_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan) -> int:
    """16-bit gradients held from the head's backward until the embedding's (whole backward).

    Tied embeddings (ZeRO-0/1): the head's share of the weight gradient waits for the
    embedding's. FSDP: the root module reduce-scatters only after the embedding's backward, so
    the head's weight gradient (tied or not) and the final norm's wait through the blocks'.
    """
    e = _act_bytes(recipe)
    if plan.zero >= 2:
        tied_head = arch.vocab_size * arch.hidden_size if arch.tied_embeddings else 0
        return _r(-(-(arch.head_params() + tied_head) // plan.tp) * e)
    if arch.tied_embeddings and plan.pp == 1:
        return _r(-(-arch.vocab_size * arch.hidden_size // plan.tp) * e)
    return 0


# ---------------------------------------------------------------- FSDP end of backward

def fsdp_reduce_dtype_bytes(recipe: Recipe) -> int:
    """Bytes per element FSDP2 reduce-scatters in: fp32 grads reduce in fp32, else 16-bit."""
    return FP32_BYTES if recipe.grad_dtype == "fp32" else _act_bytes(recipe)


def fsdp_root_params(arch: ModelArch, plan: ParallelPlan, first: bool, last: bool) -> int:
    """Parameters of the FSDP root module (everything outside the blocks) on one stage's tp rank:
    embedding on the first stage; final norm and head (a copy of a tied one when pp > 1) on the last."""
    n = arch.embedding_params() if first else 0
    if last:
        n += arch.head_params()
        if arch.tied_embeddings and plan.pp > 1:
            n += arch.vocab_size * arch.hidden_size
    return -(-n // plan.tp)


def fsdp_block_reduce_scatter_input_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan) -> int:
    """One block's unsharded gradients in the reduce dtype, padded to dp (FSDP2's reduce-scatter
    input). FSDP2 keeps the last one until the next group's post-backward (one input buffer by
    default), so the first block's is still live while the embedding runs backward."""
    block = -(-rank_layer_params(arch, plan) // plan.tp)
    return _r(-(-block // plan.dp) * plan.dp * fsdp_reduce_dtype_bytes(recipe))


def fsdp_embedding_backward_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                  first: bool, last: bool) -> int:
    """Transients when the embedding runs backward, the last op of an FSDP backward (profiled).

    The root's 16-bit gradients (the head's, held since the loss, and the embedding's) and, for
    tied embeddings, their sum: autograd adds the two out of place (aten::add, not add_, also on
    real tensors), so three vocab x hidden gradients are live.
    Plus the first block's reduce-scatter input, which FSDP2 still holds. (The root's gathered
    weights, also live, count as parameters.)
    """
    e = _act_bytes(recipe)
    root_grads = _r(fsdp_root_params(arch, plan, first, last) * e)  # one per root parameter
    # tied: the head's contribution and the sum, beside the embedding's (the parameter's own)
    tied = arch.tied_embeddings and first and last
    tied_grads = 2 * _r(-(-arch.vocab_size * arch.hidden_size // plan.tp) * e) if tied else 0
    return root_grads + tied_grads + fsdp_block_reduce_scatter_input_bytes(arch, recipe, plan)


def fsdp_root_reduce_scatter_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                   first: bool, last: bool) -> int:
    """Transients when the root reduce-scatters its gradients, after its weights are resharded.

    Its 16-bit gradients are copied into a padded reduce-scatter input (reduce dtype); they are
    then freed, except an untied head's (held by a loop variable in FSDP2's foreach_reduce),
    before the output shard is allocated. Binds for untied vocabularies (no 3-way tied sum).
    """
    e, r = _act_bytes(recipe), fsdp_reduce_dtype_bytes(recipe)
    root = fsdp_root_params(arch, plan, first, last)
    untied_head = last and not arch.tied_embeddings
    head = -(-arch.vocab_size * arch.hidden_size // plan.tp) if untied_head else 0
    shard = -(-root // plan.dp)
    rs_input = _r(shard * plan.dp * r)
    return max(_r(root * e) + rs_input, _r(head * e) + rs_input + _r(shard * r))


def fsdp_stream_pool_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, phase: str,
                           layers: int, live_grad_bytes: int = 0) -> int:
    """What the caching allocator keeps reserved in FSDP2's side-stream pools beyond what the
    peak phase (`phase`, on the compute stream) has live in them.

    FSDP2 allocates each group's flat all-gather output on its all-gather copy-in stream, and
    each reduce-scatter input and output on its reduce-scatter stream
    (torch/distributed/_composable/fsdp/_fsdp_collectives.py, foreach_all_gather and
    foreach_reduce: `with torch.cuda.stream(reduce_scatter_stream): reduce_scatter_input =
    torch.empty(...)`, `reduce_output = reduce_scatter_input.new_empty(...)`); the sharded
    gradients are views of those outputs (`sharded_param.grad`) and live there until the next
    step's zero_grad. The caching allocator reuses a freed block only for the stream it was
    allocated on (c10/cuda/CUDACachingAllocator.cpp: blocks are looked up by stream and size;
    with expandable segments, one segment per stream), so each pool stays reserved at its own
    peak: the largest group's (the root's, for a large vocabulary) 16-bit all-gather output;
    every group's gradient shard plus the largest group's reduce-scatter input, in the reduce
    dtype. Of these, the peak phase holds `live_grad_bytes` of gradient shards, the root's
    reduce-scatter input during its reduce-scatter, and a block's held input during a
    block's or the embedding's backward. (The copied-out unsharded weights live on the compute
    stream and count as parameters.)
    """
    e, r, dp = _act_bytes(recipe), fsdp_reduce_dtype_bytes(recipe), plan.dp
    block = -(-rank_layer_params(arch, plan) // plan.tp)
    root = fsdp_root_params(arch, plan, True, True)

    def padded(n: int) -> int:
        return -(-n // dp) * dp

    all_gather_pool = _r(padded(max(root, block)) * e)
    shards = layers * _r(padded(block) // dp * r) + _r(padded(root) // dp * r)
    reduce_scatter_pool = shards + _r(padded(max(root, block)) * r)
    if phase == "root_reduce_scatter":
        live = _r(padded(root) * r) + _r(padded(root) // dp * r)
    elif phase == "embedding_backward" or (phase.startswith("layer_") and phase != "layer_backward"):
        live = fsdp_block_reduce_scatter_input_bytes(arch, recipe, plan)
    else:
        live = 0
    return max(0, all_gather_pool + reduce_scatter_pool - live - live_grad_bytes)


# ---------------------------------------------------------------- optimizer step

def optimizer_step_temporary_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                   params: int) -> int:
    """16-bit gradients are copied to fp32 for the step (this rank's shard), as Megatron does."""
    if recipe.grad_dtype == "fp32" or recipe.precision == "fp32" or plan.zero >= 2:
        return 0
    shard = -(-params // plan.dp) if plan.zero == 1 else params
    return _r(shard * 4)


# ---------------------------------------------------------------- framework overhead

def allocator_slack_bytes(peak_allocated_bytes: int,
                          fraction: float = FRAGMENTATION_FRACTION) -> int:
    """Reserved but not allocated at the peak: the caching allocator's rounding of blocks and the
    fragments it cannot reuse (max_memory_reserved - max_memory_allocated)."""
    return int(peak_allocated_bytes * fraction)


def device_overhead_bytes(plan: ParallelPlan) -> int:
    """Not tensors, outside the allocator: CUDA context and library workspaces, NCCL buffers
    (when more than one GPU)."""
    return CUDA_CONTEXT_BYTES + (NCCL_BUFFER_BYTES if plan.num_gpus > 1 else 0)


# ---------------------------------------------------------------- the estimate

def validate_inputs(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
                    grad_accum: int | None, *, job_valid: bool = False) -> None:
    """ValueError naming the offending field. job_valid: arch, recipe and seq_len passed
    already (a memo's job), check the rest."""
    if not job_valid:
        arch.validate()
        recipe.validate()
    plan.validate()
    if plan.micro_batch > MAX_MICRO_BATCH:
        raise ValueError(f"plan.micro_batch {plan.micro_batch} exceeds {MAX_MICRO_BATCH}")
    if arch.num_heads % plan.tp:
        raise ValueError(f"plan.tp {plan.tp} must divide model.num_heads {arch.num_heads}")
    if arch.num_kv_heads % plan.tp:
        raise ValueError(f"plan.tp {plan.tp} must divide model.num_kv_heads {arch.num_kv_heads}")
    if plan.ep > 1 and (not arch.is_moe or arch.num_experts % plan.ep):
        raise ValueError(f"plan.ep {plan.ep} must divide model.num_experts {arch.num_experts}")
    if not job_valid:
        if not isinstance(seq_len, int) or seq_len <= 0:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        if seq_len > MAX_SEQ_LEN:
            raise ValueError(f"seq_len {seq_len} exceeds the supported maximum {MAX_SEQ_LEN}")
        if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
            raise ValueError(f"seq_len {seq_len} exceeds model.max_position_embeddings "
                             f"{arch.max_position_embeddings} (learned positions)")
    if grad_accum is not None and grad_accum <= 0:
        raise ValueError(f"grad_accum must be positive, got {grad_accum}")


# ---------------------------------------------------------------- terms memoised per job
# A plan search asks for hundreds of plans of one job, and most terms read only a few plan
# fields (a layer's activations: tp, sequence parallelism, micro-batch, recompute; model states:
# dp, ZeRO stage and the stage's parameters). Given a `memo` that the caller keeps for the job
# (plans.MemoryTable keeps one), estimate_memory computes each term once per value of the plan
# fields it reads and of its other arguments: the key at each call names them.

def layer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int, *,
                gathered_norm_outputs: bool = False) -> tuple[int, int]:
    """(saved, live) per micro-batch: what one layer saves for backward (Korthikanti), and what
    the layer running backward holds live (recomputed first under full recompute).

    Reads tp, sequence_parallel, micro_batch and recompute of the plan.
    """
    layer_act = korthikanti_layer_activation_bytes(arch, recipe, plan, seq_len,
                                                   gathered_norm_outputs=gathered_norm_outputs)
    full = plan.recompute == "full"
    recomputed = korthikanti_layer_activation_bytes(
        arch, recipe, plan, seq_len, "none", gathered_norm_outputs=gathered_norm_outputs) if full \
        else layer_act
    mlp_t, attn_t = layer_backward_transient_bytes(arch, recipe, plan, seq_len)
    attn_live = recomputed if full else recomputed - mlp_saved_bytes(arch, recipe, plan, seq_len)
    return layer_act, max(recomputed + mlp_t, attn_live + attn_t)


def stage_activation_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
                           stage: int, loss=logits_loss_bytes) -> tuple[int, int]:
    """(saved outside the layers, the loss's buffers) per micro-batch on pipeline `stage`.

    Reads tp, pp and micro_batch of the plan.
    """
    first, last = stage == 0, stage == plan.pp - 1
    return (embedding_head_activation_bytes(arch, recipe, plan, seq_len, first, last),
            loss(arch, recipe, plan, seq_len) if last else 0)


# ---------------------------------------------------------------- the reference trainer's TP x PP x DP
# frenzy_trainer.parallelize.ParallelTrainer runs every plan with tp > 1 or pp > 1 (docs/trainer.md);
# the CPU profiler measures it (frenzy_predictor.profiler) and these terms describe it.

def reference_plan_as_run(plan: ParallelPlan) -> ParallelPlan:
    """The plan whose ZeRO terms describe what ParallelTrainer keeps (tp = pp = 1: the plan).

    Its data parallelism is FSDP2 over (dp_replicate, dp_shard): dp_shard = dp for ZeRO >= 1,
    1 for ZeRO-0 (DDP semantics); ZeRO-1 runs as ZeRO-2. Without a pipeline that is FSDP's
    ZeRO-2 (or 3) over dp_shard ranks. With one, torch.distributed.pipelining runs every
    micro-batch's backward without gradient sync or reshard (PipelineStage.
    backward_maybe_with_nosync) and reduce-scatters once after the last (perform_reduce_grad):
    the 16-bit weights stay gathered and the gradients accumulate unsharded in fp32 through the
    step, beside fp32 masters and moments over dp_shard: the flat-buffer states of ZeRO-0 (dp
    ranks hold them whole) or ZeRO-1 (2 + 4 + 12/dp bytes per parameter).
    """
    if plan.tp == 1 and plan.pp == 1:
        return plan
    if plan.pp > 1:
        dp, zero = plan.dp, min(plan.zero, 1)
    else:
        dp, zero = (plan.dp if plan.zero else 1), (3 if plan.zero == 3 else 2)
    if (dp, zero) == (plan.dp, plan.zero):
        return plan
    # the constructor, not dataclasses.replace: the plan search calls this per estimate
    return ParallelPlan(dp, plan.tp, plan.pp, zero, plan.micro_batch, plan.recompute,
                        plan.sequence_parallel, plan.cp, plan.ep)


def reference_layer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                          seq_len: int) -> tuple[int, int]:
    """layer_bytes as DTensor sequence parallelism keeps it (parallelize.apply_tp): the linears
    after each norm save their all-gathered input, the whole sequence."""
    return layer_bytes(arch, recipe, plan, seq_len, gathered_norm_outputs=True)


def replicated_logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                 seq_len: int) -> int:
    """The reference head replicates its logits (ColwiseParallel with Replicate outputs, no loss
    parallelism), so the fp32 loss buffers hold the whole vocabulary on every tp rank
    (logits_loss_bytes at tp = 1). In a pipeline the last stage's forward cache
    (PipelineStage.fwd_cache) also keeps the 16-bit logits, its output, until the
    micro-batch's backward."""
    whole = logits_loss_bytes(arch, recipe, plan, seq_len, vocab=arch.vocab_size)
    cached = _r(seq_len * plan.micro_batch * arch.vocab_size * _act_bytes(recipe)) if plan.pp > 1 else 0
    return whole + cached


def pipeline_buffer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
                          stage: int, accum: int, in_flight: float, done: int) -> int:
    """What torch.distributed.pipelining keeps on a stage beside the layers' activations, each
    one residual-stream tensor of a micro-batch (micro_batch x seq_len, / tp under sequence
    parallelism, x hidden, compute dtype):

    - after the first stage: a receive buffer per micro-batch of the step (PipelineStage.
      _setup_forward_recv_info makes them once and keeps them) and the gradient autograd leaves
      in each (`buffer.grad`, cleared only when the next step starts): one per micro-batch
      `done` with backward (accum at the optimizer step);
    - before the last stage: a gradient receive buffer per micro-batch (_create_grad_recv_info)
      and the `in_flight` micro-batches' outputs in the forward cache, which nothing else keeps;
    - on stage 0 under tensor parallelism, between the first backward and the step's gradient
      reduction, the vocabulary-parallel embedding's fp32 accumulated gradient (FSDP's no-sync
      `unsharded_accumulated_grad`) covers the whole vocabulary, where the model states count
      V/tp (profiled: a (V, h) fp32 copy of a gradient DTensor sharding propagation leaves whole).
    """
    if plan.pp == 1:
        return 0
    tokens = plan.micro_batch * seq_len // (plan.tp if plan.sequence_parallel else 1)
    one = _r(tokens * arch.hidden_size * _act_bytes(recipe))
    count = 0
    if stage > 0:
        count += accum + done
    if stage < plan.pp - 1:
        count += accum + math.ceil(in_flight)
    embedding = 0
    if stage == 0 and plan.tp > 1 and 0 < done < accum:
        vocab_shard = -(-arch.vocab_size // plan.tp)
        embedding = _r(arch.vocab_size * arch.hidden_size * FP32_BYTES) \
            - _r(vocab_shard * arch.hidden_size * FP32_BYTES)
    return count * one + embedding


@dataclass(frozen=True)
class RecipeProfile:
    """Which tensors one training stack keeps, in what dtype and for how long: the terms that
    differ between stacks. estimate_memory walks the same phases (loss backward, a layer's
    backward, FSDP's end of backward, the optimizer step) with whichever terms the profile names.
    The reference trainer's profile is FRENZY; the others live in frenzy_predictor.stacks."""

    name: str
    # (arch, recipe, plan, params, grads_live) -> {parameters, gradients, optimizer_states};
    # DeepSpeed's (deepspeed, hf) also take sub_group_elements=
    model_states: Callable[..., dict[str, int]]
    # (arch, recipe, plan, seq_len) -> (saved per layer, live while a layer runs backward)
    layer: Callable[..., tuple[int, int]]
    # (arch, recipe, plan, seq_len) -> bytes at the start of backward for the loss
    logits_loss: Callable[..., int]
    allocator_slack_fraction: float = FRAGMENTATION_FRACTION  # reserved - allocated, per allocated
    # ZeRO stages at which the stack gathers sharded 16-bit weights block by block, as FSDP does
    # (the FSDP phases and buffers of estimate_memory apply); at other stages >= 2 the weights
    # stay whole and only the profile's model_states term knows the stage.
    fsdp_stages: tuple[int, ...] = (2, 3)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)  # what the stack offers: the plan search tries these
    # ... of which those it combines with pipelining (Megatron and DeepSpeed refuse ZeRO-2/3
    # with pp > 1: they would shard gradients per micro-batch)
    pipeline_zero_stages: tuple[int, ...] = (0, 1)
    # Whether the stack splits sequences over context-parallel ranks (Megatron's
    # --context-parallel-size, torchtitan's context_parallel_degree): the plan search tries cp > 1
    # for long sequences only where it does. The reference trainer has no context parallelism.
    context_parallel: bool = False
    # Library workspaces the stack allocates through PyTorch's caching allocator (so counted in
    # max_memory_allocated) and keeps for the run: cuBLAS's, Transformer Engine's. They come out
    # of the device overhead (CUDA_CONTEXT_BYTES counts them for the reference trainer, whose
    # tensor peak is checked against a CPU profiler that has none).
    workspace_bytes: int = 0
    # FSDP2's side-stream pools count in the reserved peak (fsdp_stream_pool_bytes): the stack
    # reports max_memory_reserved and shards with FSDP2 (torchtitan).
    fsdp_stream_pools: bool = False
    # (arch, recipe, plan, seq_len) -> bytes one micro-batch leaves in the output layer's
    # deferred weight-gradient buffers (Megatron's --defer-embedding-wgrad-compute); None: the
    # stack has no such option.
    deferred_output_wgrad: Callable[..., int] | None = None
    # (arch, recipe, plan, seq_len) -> the loss's bytes under the stack's fused loss option
    # (Megatron's --cross-entropy-loss-fusion); None: the stack has no such option.
    fused_logits_loss: Callable[..., int] | None = None
    # (arch, recipe, plan, seq_len) -> bytes a layer's context-parallel attention keeps beyond
    # the layer term's (plan and seq_len per cp rank); None: nothing beyond it.
    context_parallel_attention: Callable[..., int] | None = None
    # (arch, recipe, plan, at_step, bucket_elements=None) -> bytes of the stack's gradient reduce
    # buckets, in backward (at_step False) or at the optimizer step (True); bucket_elements: the
    # job's own reduce_bucket_size (None: the stack's default); None: counted elsewhere or none.
    reduce_buckets: Callable[..., int] | None = None
    # True: the gradients model_states adds when grads_live exist only inside the optimizer step
    # (DeepSpeed's fp32 copy), so backward never holds them, with or without accumulation;
    # False: they live from a step's first backward to its optimizer step (FSDP's sharded grads).
    step_only_grads: bool = False
    # plan -> the plan whose terms describe what the stack keeps, where it runs a plan another
    # way than it reads (the reference trainer's TP/PP plans); None: the plan itself.
    plan_as_run: Callable[[ParallelPlan], ParallelPlan] | None = None
    # (arch, recipe, plan, seq_len, stage, accum, in_flight, done) -> bytes the pipeline
    # schedule keeps beside the activations (receive buffers, cached outputs) with `done`
    # micro-batches through backward; None: none counted.
    pipeline_buffers: Callable[..., int] | None = None
    # Pipelines hold no gradients until the step's first backward (FSDP's no-sync accumulation
    # under torch.distributed.pipelining), when stage 0 has the most micro-batches in flight.
    pipeline_grads_after_first_backward: bool = False
    # (num_layers, pp, virtual_stages) -> the layers of each pipeline rank's model chunks, by the
    # stack's own split rule (frenzy_predictor.pipeline_split); ValueError for a split the stack
    # cannot run. Default: even splits only.
    pipeline_split: Callable[[int, int, int], PipelineSplit] = even_split
    # (arch, recipe, plan, block) -> gathered 16-bit weights autograd's saved views keep alive
    # at the loss (block None) or while `block` runs backward, for a model built outside the
    # stack's memory-efficient linear (DeepSpeed ZeRO-3 without zero.Init); None: no such case.
    saved_weight_views: Callable[..., int] | None = None
    # (arch, recipe, plan, bucket_elements=None) -> (bytes of the largest gradient-bucket copy
    # made while the layers run backward, the largest at all): DeepSpeed ZeRO-3's
    # reduce_scatter_coalesced copies (stacks.deepspeed_reduce_scatter_copy_bytes); None: none.
    reduce_scatter_copies: Callable[..., tuple[int, int]] | None = None
    # (plan, gathered_max, copy_max) -> bytes the stack's side-stream pools keep reserved, from
    # the most 16-bit weights gathered at once and the largest bucket copy
    # (reduce_scatter_copies); estimate_memory adds them to the compute stream's own high water
    # (DeepSpeed ZeRO-3: stacks.deepspeed_stream_pool_bytes); None: none modelled this way.
    stream_pools: Callable[..., int] | None = None
    # (arch, recipe, plan, params) -> bytes a check at the start of the optimizer step allocates
    # on the stack's reduce stream, beside the model states (DeepSpeed ZeRO-3's fp16 overflow
    # check: stacks.deepspeed_fp16_overflow_check_bytes); estimate_memory counts it as a phase
    # of its own and in that stream's pool; None: no such check.
    overflow_check: Callable[..., int] | None = None


def _memoised(memo: dict | None, key: tuple, term, *args):
    """term(*args), or what it returned for the same key (the plan fields the term reads and
    its other arguments). Callers must not change what it returns."""
    if memo is None:
        return term(*args)
    value = memo.get(key)
    if value is None:
        value = memo[key] = term(*args)
    return value


# ---------------------------------------------------------------- the estimate

def recipe_profile(framework: str) -> RecipeProfile:
    """The named stack's profile; ValueError naming training.framework for an unknown one."""
    if framework == "frenzy":
        return FRENZY
    if framework not in FRAMEWORKS:
        raise ValueError(f"training.framework: {framework!r} is not one of {FRAMEWORKS}")
    from frenzy_predictor.stacks import PROFILES  # the stacks import this module's terms

    return PROFILES[framework]


def pipeline_in_flight(plan: ParallelPlan, stage: int, accum: int, virtual_stages: int,
                       microbatch_group: int | None = None) -> float:
    """Micro-batches whose activations pipeline `stage` holds at its peak, in whole-stage units.

    1F1B (Narayanan et al. 2021): stage i holds pp - i. Megatron's interleaved 1F1B with v
    model chunks per rank warms up (pp - i - 1)·2 + (v - 1)·g chunks, plus the one running
    (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches, L964-965 at
    d98e8a64dd), each 1/v of a stage; never more than the step's accum·v chunks. g is
    --microbatch-group-size-per-virtual-pipeline-stage (`microbatch_group`), whose default is pp
    (megatron/training/arguments.py).
    """
    if virtual_stages <= 1:
        return min(plan.pp - stage, accum)
    group = plan.pp if microbatch_group is None else microbatch_group
    chunks = (plan.pp - stage - 1) * 2 + (virtual_stages - 1) * group + 1
    return min(chunks, accum * virtual_stages) / virtual_stages


def check_pipeline_split(split: PipelineSplit, arch: ModelArch, plan: ParallelPlan,
                         virtual_stages: int) -> None:
    """ValueError naming pipeline_split unless it has plan.pp ranks of virtual_stages chunks
    that hold every layer, at least one per rank."""
    shape = {len(chunks) for chunks in split.chunk_layers}
    if len(split.chunk_layers) != plan.pp or shape != {virtual_stages}:
        raise ValueError(f"pipeline_split: {split.chunk_layers} is not {plan.pp} stages of "
                         f"{virtual_stages} chunks")
    if sum(split.stage_layers) != arch.num_layers or min(min(c) for c in split.chunk_layers) < 0 \
            or min(split.stage_layers) <= 0:
        raise ValueError(f"pipeline_split: {split.stage_layers} must hold model.num_layers "
                         f"{arch.num_layers}, at least one on every stage")


def peak_stage_candidates(split: PipelineSplit) -> list[int]:
    """Pipeline stages that may hold the per-rank peak: the first (the most micro-batches in
    flight, the embedding), the last (the output layer and the loss) and each middle stage
    holding more layers than every stage before it (an uneven split's heavier stages). A middle
    stage with no more layers than an earlier one holds fewer micro-batches of no more layers and
    neither end's modules: below that one. Even splits: the first and the last."""
    layers = split.stage_layers
    stages, most = [0], layers[0]
    for stage in range(1, len(layers) - 1):
        if layers[stage] > most:
            stages.append(stage)
            most = layers[stage]
    return stages + ([len(layers) - 1] if len(layers) > 1 else [])


def chunk_in_flight(split: PipelineSplit, plan: ParallelPlan, stage: int, in_flight: float,
                    virtual_stages: int, microbatch_group: int | None = None) -> tuple[int, int]:
    """(layers, micro-batches of the stage's end modules) in flight on `stage` when its model
    chunks hold different numbers of layers: `in_flight` x virtual_stages chunk forwards, taken
    in Megatron's interleaved order (schedules.py get_model_chunk_id: forward k runs chunk
    (k mod g·v) // g, g micro-batches per chunk in turn). The embedding rides with chunk 0 of
    the first stage, the output layer with the last chunk of the last stage."""
    group = plan.pp if microbatch_group is None else microbatch_group
    chunks = split.chunk_layers[stage]
    counts = [0] * len(chunks)
    for k in range(round(in_flight * virtual_stages)):
        counts[(k % (group * virtual_stages)) // group] += 1
    held = sum(n * c for n, c in zip(counts, chunks))
    ends = (counts[0] if stage == 0 else 0) + (counts[-1] if stage == plan.pp - 1 else 0)
    return held, ends


def estimate_memory(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int, *,
                    grad_accum: int | None = None, memo: dict | None = None,
                    framework: str | None = None, stage: int | None = None,
                    virtual_stages: int = 1, defer_output_wgrad: bool = False,
                    microbatch_group: int | None = None,
                    fused_loss: bool = False,
                    reduce_bucket_elements: int | None = None,
                    sub_group_elements: int | None = None,
                    saved_weight_views: bool = False,
                    sdpa_native_gqa: bool = False,
                    pipeline_split: PipelineSplit | None = None) -> MemoryEstimate:
    """Per-rank peak memory of one training step of the reference recipe, or of another
    stack's recipe profile (`framework`, default recipe.framework; see frenzy_predictor.stacks).

    stage: only this pipeline stage's ranks (a stack that logs one rank's peak, as Megatron
    logs the last); None: the largest over stages. virtual_stages: Megatron's interleaved
    schedule's model chunks per rank (1: plain 1F1B); microbatch_group: its micro-batches per
    group (Megatron's --microbatch-group-size-per-virtual-pipeline-stage; None: pp).
    fused_loss: the stack's fused loss (Megatron's --cross-entropy-loss-fusion).
    reduce_bucket_elements: the job's DeepSpeed reduce_bucket_size (zero_optimization), when its
    config sets one; None: the stack's default (DeepSpeed's 5e8, the HF Trainer's hidden²).
    sub_group_elements: the job's DeepSpeed sub_group_size (ZeRO-3 steps one sub-group at a time);
    None: DeepSpeed's default, 1e9.
    saved_weight_views: the model was built outside the stack's memory-efficient linear
    (DeepSpeed ZeRO-3 without deepspeed.zero.Init, as when an HF model is loaded before the
    Trainer's arguments name the DeepSpeed config), so autograd's saved weight views keep
    gathered weights alive until their backward (stacks.deepspeed_saved_weight_view_bytes).
    sdpa_native_gqa: a transformers model calls SDPA with enable_gqa, so a grouped-query layer
    saves K and V at their own width (current transformers with torch >= 2.5 and no attention
    mask); False: K and V repeated to every query head (stacks.hf_sdpa_repeated_kv_bytes).
    pipeline_split: the layers of each pipeline rank's chunks when the job sets them
    (Megatron's --decoder-first/last-pipeline-num-layers, --account-for-*-in-pipeline-split:
    pipeline_split.megatron_split); None: the stack's default rule (profile.pipeline_split).
    defer_output_wgrad: the output layer's
    weight gradient waits for the pipeline flush (Megatron's --defer-embedding-wgrad-compute),
    so the last stage keeps every micro-batch's buffers through backward.

    grad_accum: micro-batches per optimizer step; None (unknown) assumes more than one, the
    conservative case (FSDP's sharded grads then live through forward, and 1F1B has pp
    micro-batches in flight).
    memo: a dict the caller keeps for the plans of one job (the same arch, recipe and seq_len):
    each term is then computed once per value of the plan fields it reads (see _memoised) and
    the job's fields are validated once. The estimate is the same with or without it.
    """
    framework = framework or recipe.framework
    profile = recipe_profile(framework)
    job = (arch, recipe, seq_len, framework, reduce_bucket_elements, sub_group_elements,
           saved_weight_views, sdpa_native_gqa)
    job_valid = memo is not None and "job" in memo  # an earlier call validated the memo's job
    if job_valid and memo["job"] != job:
        raise ValueError("memo: kept for another job (model, recipe, seq_len or framework)")
    validate_inputs(arch, recipe, plan, seq_len, grad_accum, job_valid=job_valid)
    if stage is not None and not 0 <= stage < plan.pp:
        raise ValueError(f"stage: {stage} is not a pipeline stage of pp {plan.pp}")
    if virtual_stages < 1:
        raise ValueError(f"virtual_stages: must be positive, got {virtual_stages}")
    if microbatch_group is not None and microbatch_group <= 0:
        raise ValueError(f"microbatch_group: must be positive, got {microbatch_group}")
    # The stack's own split of the layers over the pipeline (its rule refuses what it cannot run)
    split = pipeline_split or _memoised(memo, ("split", plan.pp, virtual_stages),
                                        profile.pipeline_split, arch.num_layers, plan.pp,
                                        virtual_stages)
    if pipeline_split is not None:
        check_pipeline_split(split, arch, plan, virtual_stages)
    if plan.ep > 1 and not split.even:
        raise ValueError(f"plan.ep: {plan.ep}: expert parallelism with an uneven pipeline split "
                         f"{split.stage_layers} is not modelled")
    if reduce_bucket_elements is not None and reduce_bucket_elements <= 0:
        raise ValueError(f"reduce_bucket_elements: must be positive, got {reduce_bucket_elements}")
    model_states = profile.model_states
    if sub_group_elements is not None:
        if sub_group_elements <= 0 or profile.name not in ("deepspeed", "hf"):
            raise ValueError(f"sub_group_elements: a positive DeepSpeed sub_group_size for the "
                             f"deepspeed or hf stack, got {sub_group_elements} for {framework}")
        model_states = partial(profile.model_states, sub_group_elements=sub_group_elements)
    if fused_loss and profile.fused_logits_loss is None:
        raise ValueError(f"fused_loss: {framework} has no fused loss option")
    layer_term = profile.layer
    if sdpa_native_gqa:
        if profile.name not in ("deepspeed", "hf"):
            raise ValueError(f"sdpa_native_gqa: a transformers model's SDPA option, for the "
                             f"deepspeed or hf stack, got {framework}")
        layer_term = partial(profile.layer, sdpa_native_gqa=True)
    if saved_weight_views and profile.saved_weight_views is None:
        raise ValueError(f"saved_weight_views: {framework} gathers no weights that way "
                         f"(deepspeed and hf do, under ZeRO-3)")
    loss_term = profile.fused_logits_loss if fused_loss else profile.logits_loss
    if defer_output_wgrad and (profile.deferred_output_wgrad is None or plan.pp == 1):
        raise ValueError(f"defer_output_wgrad: needs a pipeline (pp > 1) and a stack that "
                         f"offers it (megatron), got pp {plan.pp} and {framework}")
    if memo is not None:
        memo["job"] = job
    cp = plan.cp
    if cp > 1:
        # Context parallelism (Megatron's --context-parallel-size, torchtitan's CP): each rank
        # holds seq_len / cp tokens of every layer, and both shard optimizer states over
        # dp x cp (data_parallel_group_with_cp; the dp_shard_cp mesh). Memory-wise a cp group is
        # cp more data-parallel ranks with shorter sequences; the ring's in-flight K/V chunks
        # (2 per layer, transient) are not counted.
        if seq_len % cp:
            raise ValueError(f"plan.cp: {cp} must divide seq_len {seq_len}")
        plan, seq_len = replace(plan, dp=plan.dp * cp, cp=1), seq_len // cp
    gpus_plan = plan  # the GPUs: whether NCCL buffers exist
    if profile.plan_as_run is not None:
        plan = profile.plan_as_run(plan)
    accum = grad_accum if grad_accum is not None else max(2, plan.pp)
    grads_in_backward = accum > 1 and not profile.step_only_grads
    # The profile's model states see the plan's ZeRO stage; the FSDP terms see it only where the
    # stack gathers weights FSDP-style (DeepSpeed ZeRO-2 keeps whole 16-bit weights).
    states_plan = plan
    if plan.zero >= 2 and plan.zero not in profile.fsdp_stages:
        plan = replace(plan, zero=1)
    full = plan.recompute == "full"
    # One layer: saved for backward, and live while it runs backward.
    layer_act, layer_live = _memoised(
        memo, ("layer", cp, plan.tp, plan.sequence_parallel, plan.micro_batch, plan.recompute),
        layer_term, arch, recipe, plan, seq_len)
    if cp > 1 and profile.context_parallel_attention is not None:
        # saved unless recompute drops the attention's tensors; live in its backward either way
        extra = profile.context_parallel_attention(arch, recipe, plan, seq_len)
        layer_act += extra if plan.recompute == "none" else 0
        layer_live += extra
    pending = _memoised(memo, ("pending", plan.ep, plan.tp, plan.pp, plan.zero),
                        pending_embedding_grad_bytes, arch, recipe, plan)
    fsdp = plan.zero >= 2
    block_shard = 0
    if fsdp:
        block = -(-rank_layer_params(arch, plan) // plan.tp)
        block_shard = _r(-(-block // plan.dp) * 4)

    def layer_peak(layers: int) -> tuple[list[int], list[int], int, int, int]:
        """(blocks, their FSDP buffers, index of the peak block, gathered weights at the loss,
        in the peak block) on a stage of `layers` layers.

        Blocks whose backward may hold the peak. FSDP: block layers-1 runs backward first, block
        0 last; in between, activations shrink and sharded grads grow linearly, and the buffers
        change only next to the ends, so the peak is at block layers-1, layers-2, 1 or 0. Block
        1 holds a layer's activations and a block's 16-bit weights (ZeRO-3's prefetch, ZeRO-2's
        own) more than block 0 and one fp32 grad shard (4/dp of a block) fewer: it dominates if
        dp > 1. Without FSDP only the first (the last layer) can be the peak.
        What differs between those blocks is the same on every stage of as many layers: i
        layers' activations, FSDP buffers, gathered weights and (no accumulation) the fp32 grad
        shards of the blocks already through backward. Pick the block here; the stage adds what
        all blocks share."""
        blocks = [layers - 1]
        if fsdp:
            for i in (layers - 2, 1, 0 if plan.dp == 1 else -1):  # descending, without repeats
                if 0 <= i < blocks[-1]:
                    blocks.append(i)
        buffers = _memoised(memo, ("buffers", plan.ep, plan.tp, plan.dp, plan.zero, full, layers,
                                   *blocks),
                            fsdp_block_backward_bytes, arch, recipe, plan, layers, blocks)
        differing = [i * layer_act + b for i, b in zip(blocks, buffers)]
        if fsdp:
            for k, i in enumerate(blocks):  # gathered weights; grad shards without accumulation
                differing[k] += fsdp_gathered_blocks(plan, i) * block * _act_bytes(recipe) \
                    + ((layers - 1 - i) * block_shard if accum == 1 else 0)
        k = differing.index(max(differing))
        loss_weights = layer_weights = 0
        if fsdp:  # gathered at the loss (every ZeRO-2 block, ZeRO-3's last) and in the peak block
            loss_blocks = fsdp_gathered_blocks(plan, layers - 1)
            loss_weights = _memoised(memo, ("gathered", plan.ep, plan.tp, loss_blocks),
                                     fsdp_gathered_bytes, arch, recipe, plan, loss_blocks)
            peak_blocks = fsdp_gathered_blocks(plan, blocks[k])
            layer_weights = loss_weights if k == 0 else \
                _memoised(memo, ("gathered", plan.ep, plan.tp, peak_blocks),
                          fsdp_gathered_bytes, arch, recipe, plan, peak_blocks)
        return blocks, buffers, k, loss_weights, layer_weights

    best: tuple[int, dict[str, int], str, int] | None = None
    gathered_max = compute_max = 0  # side-stream pools: see the reserved peak below
    copies = (0, 0)  # bucket copies: (the largest in a layer's backward, the largest at all)
    overflow_max = 0  # the step's overflow check on the reduce stream (profile.overflow_check)
    if fsdp and profile.reduce_scatter_copies is not None:
        copies = _memoised(memo, ("reduce_scatter_copies", plan.ep, plan.tp, plan.pp, plan.dp,
                                  states_plan.zero),
                           profile.reduce_scatter_copies, arch, recipe, states_plan,
                           reduce_bucket_elements)
    stages = peak_stage_candidates(split) if stage is None else [stage]
    peak_layers = 0  # the layers of the stage holding the peak
    layer_peaks: dict[int, tuple] = {}
    for stage in stages:
        first, last = stage == 0, stage == plan.pp - 1
        layers = split.stage_layers[stage]
        if layers not in layer_peaks:  # stages of as many layers share it (even splits: all)
            layer_peaks[layers] = layer_peak(layers)
        blocks, buffers, k, loss_weights, layer_weights = layer_peaks[layers]
        peak_block = blocks[k]
        layer_phase = "layer_backward" if k == 0 else f"layer_{peak_block}_backward"
        in_flight = pipeline_in_flight(plan, stage, accum, virtual_stages, microbatch_group)
        params = _memoised(memo, ("params", plan.ep, plan.tp, plan.pp, stage, layers),
                           stage_params, arch, plan, stage, layers)
        states_bwd = dict(_memoised(memo, ("states", plan.ep, plan.tp, plan.pp, plan.dp,
                                           states_plan.zero, params, grads_in_backward),
                                    model_states, arch, recipe, states_plan, params,
                                    grads_in_backward))
        own_params = states_bwd["parameters"]  # what the stack keeps besides gathered weights
        if fsdp:
            states_bwd["parameters"] = own_params + loss_weights
        outside, loss = _memoised(memo, ("stage", cp, plan.tp, plan.pp, plan.micro_batch, stage,
                                         fused_loss),
                                  stage_activation_bytes, arch, recipe, plan, seq_len, stage,
                                  loss_term)
        inputs = input_bytes(seq_len, plan, accum)
        # (in-flight micro-batches, gradients live, micro-batches done) at the backward peaks
        rounds = [(in_flight, True, accum - 1)]
        if profile.pipeline_grads_after_first_backward and plan.pp > 1:
            # 1F1B: the first backward has the most in flight and no gradients yet; later ones
            # min(w, accum - k) in flight before B_k, and the accumulated gradients. With
            # accum > w the later ones hold as many in flight and more: they alone can peak.
            later = [(min(in_flight, accum - 1), True, accum - 1)] if accum > 1 else []
            rounds = later if accum - 1 >= in_flight else [(in_flight, False, 0)] + later
        backward_phases: list[tuple[str, dict[str, int]]] = []
        for flying, grads_live, done in rounds:
            states = states_bwd if grads_live else {**states_bwd, "gradients": 0}
            if split.even_chunks(stage):
                acts = int(flying * (layers * layer_act + outside))
                others = int((flying - 1) * layers * layer_act)  # beside the one in backward
            else:  # chunks of different sizes: count each chunk's micro-batches in flight
                held, held_outside = chunk_in_flight(split, plan, stage, flying, virtual_stages,
                                                     microbatch_group)
                acts = held * layer_act + held_outside * outside
                others = (held - layers) * layer_act
            backward = {**states, "activations": acts, "logits_loss": loss, "temporaries": inputs}
            pipeline = profile.pipeline_buffers(arch, recipe, plan, seq_len, stage, accum, flying,
                                                done) if profile.pipeline_buffers else 0
            if pipeline:
                backward["pipeline_buffers"] = pipeline

            # A layer's backward (dominates for small vocabularies, eager long sequences, or
            # FSDP buffers larger than a layer's activations). Block i keeps i layers'
            # activations (+ its own input under full recompute); with FSDP and no
            # accumulation, the blocks after it already hold their fp32 grad shards.
            layer_acts = others + peak_block * layer_act \
                + (layer_act if full else 0) + layer_live
            layer_bwd = {**states, "activations": layer_acts, "logits_loss": 0,
                         "temporaries": inputs + pending + buffers[k]}
            if pipeline:
                layer_bwd["pipeline_buffers"] = pipeline
            if defer_output_wgrad and last:
                # The last micro-batch's backward: the earlier ones' deferred buffers at the
                # loss, its own too once the output layer has run backward.
                deferred = profile.deferred_output_wgrad(arch, recipe, plan, seq_len)
                backward["deferred_output_wgrad"] = (accum - 1) * deferred
                layer_bwd["deferred_output_wgrad"] = accum * deferred
            if fsdp:
                layer_bwd["parameters"] = own_params + layer_weights
                if accum == 1:
                    layer_bwd["gradients"] = (layers - 1 - peak_block) * block_shard
            if copies[0]:  # a bucket fills every few layers: copied in a layer's backward
                layer_bwd["reduce_scatter_copy"] = copies[0]
            if saved_weight_views:  # grows toward the last layer, the block picked above
                held = profile.saved_weight_views(arch, recipe, plan, None)
                if held:
                    backward["saved_weight_views"] = held
                held = profile.saved_weight_views(arch, recipe, plan, peak_block)
                if held:
                    layer_bwd["saved_weight_views"] = held
            backward_phases += [("backward", backward), (layer_phase, layer_bwd)]

        # FSDP, end of backward (large vocabularies, short sequences): every block's sharded
        # grads exist and activations are gone; the embedding runs backward with the root's
        # weights gathered, then the root reshards and reduce-scatters its gradients.
        embedding_bwd = root_rs = None
        if fsdp:
            all_shards = states_bwd["gradients"] or layers * block_shard
            states = states_bwd["optimizer_states"]
            if first:
                gathered_root = _r(fsdp_root_params(arch, plan, first, last) * _act_bytes(recipe))
                transients = _memoised(memo, ("embedding_backward", plan.ep, plan.tp, plan.pp, plan.dp, stage),
                                       fsdp_embedding_backward_bytes, arch, recipe, plan, first, last)
                embedding_bwd = {"parameters": own_params + gathered_root, "gradients": all_shards,
                                 "optimizer_states": states, "activations": 0, "logits_loss": 0,
                                 "temporaries": inputs + transients}
            transients = _memoised(memo, ("root_reduce_scatter", plan.ep, plan.tp, plan.pp, plan.dp, stage),
                                   fsdp_root_reduce_scatter_bytes, arch, recipe, plan, first, last)
            root_rs = {"parameters": own_params, "gradients": all_shards, "optimizer_states": states,
                       "activations": 0, "logits_loss": 0, "temporaries": inputs + transients}

        states_opt = _memoised(memo, ("states", plan.ep, plan.tp, plan.pp, plan.dp,
                                      states_plan.zero, params, True),
                               model_states, arch, recipe, states_plan, params, True)
        optimizer = {**states_opt, "activations": 0, "logits_loss": 0,
                     "temporaries": inputs + optimizer_step_temporary_bytes(arch, recipe, plan, params)}
        pipeline = profile.pipeline_buffers(arch, recipe, plan, seq_len, stage, accum, 0,
                                            accum) if profile.pipeline_buffers else 0
        if pipeline:
            optimizer["pipeline_buffers"] = pipeline
        overflow = None
        check = profile.overflow_check(arch, recipe, states_plan, params) \
            if profile.overflow_check is not None else 0
        if check:  # before the step makes any fp32 gradient: the states backward holds
            states_check = _memoised(memo, ("states", plan.ep, plan.tp, plan.pp, plan.dp,
                                            states_plan.zero, params, False),
                                     model_states, arch, recipe, states_plan, params, False)
            overflow = {**states_check, "activations": 0, "logits_loss": 0,
                        "temporaries": inputs, "overflow_check": check}
            overflow_max = max(overflow_max, check)
        for phase, terms in (*backward_phases,
                             ("embedding_backward", embedding_bwd), ("root_reduce_scatter", root_rs),
                             ("overflow_check", overflow), ("optimizer", optimizer)):
            if terms is None:
                continue
            if profile.reduce_buckets is not None:
                buckets = profile.reduce_buckets(arch, recipe, states_plan,
                                                 phase in ("overflow_check", "optimizer"),
                                                 bucket_elements=reduce_bucket_elements)
                if buckets:
                    terms["reduce_buckets"] = buckets
            if profile.workspace_bytes:
                terms["workspaces"] = profile.workspace_bytes
            total = sum(terms.values())
            # what this phase holds in side-stream pools: the 16-bit weights gathered (beyond
            # one rank) and a bucket copy; the rest is the compute stream's
            gathered = terms["parameters"] - own_params + terms.get("saved_weight_views", 0) \
                if plan.dp > 1 else 0
            gathered_max = max(gathered_max, gathered)
            compute_max = max(compute_max, total - gathered - terms.get("reduce_scatter_copy", 0)
                              - terms.get("overflow_check", 0))
            if best is None or total > best[0]:
                best = (total, terms, phase, stage)
                peak_layers = layers
    peak, terms, phase, stage = best
    slack = profile.allocator_slack_fraction
    reserved = peak + allocator_slack_bytes(peak, slack)
    if fsdp and profile.fsdp_stream_pools and plan.dp > 1:
        reserved += fsdp_stream_pool_bytes(arch, recipe, plan, phase, peak_layers,
                                           terms.get("gradients", 0))
    if fsdp and profile.stream_pools is not None:
        # each pool stays reserved at its own high water, whichever phase reached it
        pools = profile.stream_pools(states_plan, gathered_max, max(copies[1], overflow_max))
        reserved = max(reserved, compute_max + allocator_slack_bytes(compute_max, slack) + pools)
    device = reserved + device_overhead_bytes(gpus_plan) - profile.workspace_bytes  # counted once
    breakdown = {**terms, "framework_overhead": device - peak}
    return MemoryEstimate(peak, reserved, device, breakdown, phase, stage, framework,
                          split.stage_layers)


FRENZY = RecipeProfile("frenzy", model_states=model_state_bytes, layer=reference_layer_bytes,
                       logits_loss=replicated_logits_loss_bytes,
                       plan_as_run=reference_plan_as_run, pipeline_buffers=pipeline_buffer_bytes,
                       pipeline_grads_after_first_backward=True, pipeline_split=reference_split)
