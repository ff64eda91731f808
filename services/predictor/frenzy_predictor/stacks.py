"""Recipe profiles of the training stacks people run: Megatron-LM, torchtitan, DeepSpeed, HF Trainer.

A profile (memory.RecipeProfile) names the terms that differ from the reference trainer's:
the model states each stack keeps per ZeRO stage, what a layer saves for backward under its
recompute modes, and the loss's buffers. estimate_memory walks the same phases for every stack
(docs/marp-stacks.md). Each term cites the file of the framework it follows; the versions read
are those in docs/marp-stacks.md. A term changes only when the framework's code says so, never
to fit one measured row (bench/marp_published.py).
"""
from __future__ import annotations

from dataclasses import replace

from frenzy.catalog.models import ModelArch
from frenzy.domain import OPTIMIZER_MOMENT_BYTES, ParallelPlan, Recipe
from frenzy_predictor.memory import (FP32_BYTES, MIB, RecipeProfile, _act_bytes, _r,
                                     korthikanti_layer_activation_bytes, layer_backward_transient_bytes,
                                     layer_bytes, logits_loss_bytes, mlp_saved_bytes,
                                     model_state_bytes, pipeline_buffer_bytes, rank_layer_params)
from frenzy_predictor.pipeline_split import megatron_split, torchtitan_split

# torchtitan's run_train.sh sets PYTORCH_ALLOC_CONF=expandable_segments:True: the allocator maps
# 2 MiB pages into one growing segment per stream instead of caching whole blocks, so reserved
# exceeds allocated by page rounding only. 1% is our assumption for it, not a fit.
EXPANDABLE_SEGMENTS_SLACK_FRACTION = 0.01

# Workspaces allocated through PyTorch's caching allocator, held for the run. MARP's memory does
# not depend on the GPU type, so each takes its Hopper size, the larger:
# - PyTorch's cuBLAS workspace, one per (handle, stream) running GEMMs (the compute stream here),
#   allocated by the caching allocator (aten/src/ATen/cuda/CublasHandlePool.cpp,
#   parseChosenWorkspaceSize / getNewWorkspace): 32 MiB on Hopper and later, and under
#   CUBLAS_WORKSPACE_CONFIG=:4096:8 (Megatron's deterministic CI configs set it); by default
#   :4096:2:16:8 = 8 MiB + 128 KiB on earlier GPUs. Recent PyTorch shares it with cuBLASLt.
# - Transformer Engine's cuBLASLt workspace (transformer_engine/pytorch/module/base.py
#   get_workspace: torch.empty(get_cublas_workspace_size_bytes()), 32 MiB from compute
#   capability 9, 4 MiB before), used by every TE GEMM (Megatron's default transformer_impl).
TORCH_CUBLAS_WORKSPACE_BYTES = 32 * MIB
TE_CUBLAS_WORKSPACE_BYTES = 32 * MIB


def _tokens(plan: ParallelPlan, seq_len: int) -> int:
    return seq_len * plan.micro_batch


def _vocab_shard(arch: ModelArch, plan: ParallelPlan) -> int:
    return -(-arch.vocab_size // plan.tp)


# ---------------------------------------------------------------- Megatron-LM (megatron/core)

def megatron_model_state_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, params: int,
                               grads_live: bool) -> dict[str, int]:
    """16-bit weights, a persistent fp32 `main_grad` buffer (arguments.py turns
    accumulate_allreduce_grads_in_fp32 on with bf16; distributed/param_and_grad_buffer.py), and
    fp32 master weights + Adam moments (optimizer/optimizer.py Float16OptimizerWithFloat16Params),
    sharded over dp by the distributed optimizer (optimizer/distrib_optimizer.py; zero >= 1).
    Megatron has no ZeRO-2/3 in this path: zero >= 1 means --use-distributed-optimizer.
    """
    return model_state_bytes(arch, recipe, replace(plan, zero=min(plan.zero, 1)), params,
                             grads_live)


def megatron_layer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                         seq_len: int) -> tuple[int, int]:
    """Transformer Engine layers save what Korthikanti et al. 2022 count: LayerNormLinear keeps
    its input, its normalised output and fp32 mu/rsigma (transformer_engine/pytorch/module/
    layernorm_linear.py), fused attention keeps q, k, v, its output and fp32 softmax stats,
    bias-dropout-add a bool mask (megatron/core/fusions/fused_bias_dropout.py), the MLP fc1's
    output and the activation's. Selective recompute (`--recompute-granularity selective`)
    recomputes core attention only (transformer/transformer_block.py), which flash attention
    already does; full recompute keeps each layer's input. Same tensors as the reference
    trainer's layer: the reference term applies."""
    return layer_bytes(arch, recipe, plan, seq_len)


def megatron_logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                               seq_len: int) -> int:
    """Vocab-parallel cross-entropy works in place (megatron/core/tensor_parallel/
    cross_entropy.py): logits.float() is the only fp32 copy, max-subtract, exp and divide
    overwrite it and the softmax is saved; backward updates it in place and casts to 16 bits.
    6 B per logit (fp32 softmax + 16-bit logits or their gradient)."""
    logits = _tokens(plan, seq_len) * _vocab_shard(arch, plan)
    return _r(logits * FP32_BYTES) + _r(logits * _act_bytes(recipe))


def megatron_fused_logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                     seq_len: int) -> int:
    """--cross-entropy-loss-fusion (megatron/core/fusions/fused_cross_entropy.py) runs the same
    in-place steps as the unfused loss, each wrapped in `jit_fuser`, which is torch.compile
    from PyTorch 2.2 (megatron/core/jit.py). Compiled, an in-place update of a graph input
    (`vocab_parallel_logits -= ...`, `torch.exp(..., out=...)`, `div_`; in backward the
    softmax's `index_put` and `mul_`) is computed into a buffer of its own and then copied into
    the input: Inductor's MutationLayout.realize_into (torch/_inductor/ir.py) copies src into
    dst and "cannot change src's layout to mutate dst directly as this would alias src to dst",
    and a value read twice (the exp by the sum and by the copy) is realized. One more fp32
    logit-sized buffer than the in-place loss: 10 B per logit."""
    logits = _tokens(plan, seq_len) * _vocab_shard(arch, plan)
    return megatron_logits_loss_bytes(arch, recipe, plan, seq_len) + _r(logits * FP32_BYTES)


def megatron_context_parallel_attention_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                              seq_len: int) -> int:
    """Transformer Engine's context-parallel attention (AttnFuncWithCPAndKVP2P.forward,
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, at
    d0067d0da) saves q, `kv = p2p_comm_buffers[-1]` (the K and V chunk the ring delivered last,
    a buffer of its own) and `out_part = out.to(...)`, a 16-bit copy of the corrected output,
    while it returns another (`out_f16 = out.to(...)`), which the output projection saves. Beyond
    the layer term (q, the rank's own k and v, one attention output): the ring's K/V chunk and
    the second output copy, per cp rank (`seq_len` is the rank's)."""
    tokens, e, t = _tokens(plan, seq_len), _act_bytes(recipe), plan.tp
    return _r(2 * tokens * arch.kv_dim * e // t) + _r(tokens * arch.q_dim * e // t)


def megatron_deferred_output_wgrad_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                         seq_len: int) -> int:
    """--defer-embedding-wgrad-compute (wgrad_deferral_limit 0: every micro-batch): the output
    layer's forward appends its input (input_parallel, sequence-parallel-sharded when SP is on)
    to embedding_activation_buffer (tensor_parallel/layers.py ColumnParallelLinear.forward), and
    its backward appends the 16-bit logit gradient to grad_output_buffer instead of computing
    the weight gradient (LinearWithGradAccumulationAndAsyncCommunication.backward). Both lists
    are drained by drain_embedding_wgrad_compute (core/utils.py) only at the pipeline flush
    (pipeline_parallel/schedules.py finish_embedding_wgrad_compute), so on the last stage each
    micro-batch keeps tokens x (vocab / tp + hidden) 16-bit values through the rest of
    backward."""
    rep = plan.tp if plan.sequence_parallel else 1
    tokens, e = _tokens(plan, seq_len), _act_bytes(recipe)
    return _r(tokens * _vocab_shard(arch, plan) * e) + _r(tokens * arch.hidden_size * e // rep)


MEGATRON = RecipeProfile("megatron", model_states=megatron_model_state_bytes,
                         layer=megatron_layer_bytes, logits_loss=megatron_logits_loss_bytes,
                         fsdp_stages=(), zero_stages=(0, 1), context_parallel=True,
                         deferred_output_wgrad=megatron_deferred_output_wgrad_bytes,
                         fused_logits_loss=megatron_fused_logits_loss_bytes,
                         context_parallel_attention=megatron_context_parallel_attention_bytes,
                         pipeline_split=megatron_split,
                         workspace_bytes=TORCH_CUBLAS_WORKSPACE_BYTES + TE_CUBLAS_WORKSPACE_BYTES)


# ---------------------------------------------------------------- torchtitan (FSDP2)

def torchtitan_layer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                           seq_len: int) -> tuple[int, int]:
    """torchtitan's activation checkpointing (torchtitan/distributed/activation_checkpoint.py,
    earlier torchtitan/parallelisms/parallelize_llama.py):

    - `selective` (option "op", the default in the llama3 train configs) saves the outputs of
      mm ops except every second one, of SDPA and of reduce-scatters, and recomputes the rest.
      In a Llama block the mms run wq, wk, wv, wo, w1, w3, w2: wq, wv, w1 and w2 are saved, with
      flash attention's output and fp32 logsumexp and the block input (the checkpoint's);
    - `full` saves the block input only;
    - `none` saves what eager PyTorch saves: the reference trainer's layer.
    The layer running backward is recomputed first, so it holds its full activations then.
    """
    if plan.recompute != "selective":
        return layer_bytes(arch, recipe, plan, seq_len)
    tokens, e, t = _tokens(plan, seq_len), _act_bytes(recipe), plan.tp
    h, kv, f, q = arch.hidden_size, arch.kv_dim, arch.active_ffn_size, arch.q_dim
    rep = t if plan.sequence_parallel else 1
    saved = _r(tokens * h * e // rep)  # block input
    saved += _r(tokens * q * e // t) + _r(tokens * kv * e // t)  # wq, wv outputs
    saved += _r(tokens * q * e // t) + _r(plan.micro_batch * (arch.num_heads // t) * seq_len
                                          * FP32_BYTES)  # SDPA output and logsumexp
    saved += _r(tokens * f * e // t) + _r(tokens * h * e // rep)  # w1 output, w2 output
    full = korthikanti_layer_activation_bytes(arch, recipe, plan, seq_len, "none")
    mlp_t, attn_t = layer_backward_transient_bytes(arch, recipe, plan, seq_len)
    live = max(full + mlp_t, full - mlp_saved_bytes(arch, recipe, plan, seq_len) + attn_t)
    return saved, live


def torchtitan_model_state_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, params: int,
                                 grads_live: bool) -> dict[str, int]:
    """FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
    (torchtitan/distributed/parallel_dims.py, parallelize_llama.apply_fsdp): fp32 sharded
    parameters are the masters, fp32 sharded grads, Adam moments: 16 B/param / dp — the
    reference trainer's ZeRO-3 term. torchtitan shards with FSDP whenever dp > 1."""
    return model_state_bytes(arch, recipe, plan, params, grads_live)


def torchtitan_logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                 seq_len: int) -> int:
    """cross_entropy(pred.flatten(0, 1).float(), labels) (torchtitan/components/loss.py; earlier
    train.py), pred deleted before backward: log_softmax saves its fp32 output, backward adds
    the fp32 gradients of log-softmax and of the logits. 12 B per logit, the reference
    trainer's term (same code path)."""
    return logits_loss_bytes(arch, recipe, plan, seq_len)


def torchtitan_plan_as_run(plan: ParallelPlan) -> ParallelPlan:
    """Pipelines keep their weights gathered and their gradients unsharded through the step.

    With pp > 1 torchtitan shards with FSDP2 without resharding after forward
    (parallelisms/parallelize_llama.py `apply_fsdp` at 9dec370: `if pp_enabled: ...
    reshard_after_forward = False`), and torch.distributed.pipelining runs each micro-batch's
    backward without gradient sync (PipelineStage.backward_maybe_with_nosync), reduce-scattering
    once after the last: 16-bit weights whole, fp32 gradients accumulated unsharded (reduce_dtype
    fp32), fp32 masters and moments over dp. That is the reference trainer's pipeline (the same
    torch code; memory.reference_plan_as_run, profiled): ZeRO-1's terms."""
    if plan.pp == 1 or plan.zero <= 1:
        return plan
    return ParallelPlan(plan.dp, plan.tp, plan.pp, 1, plan.micro_batch, plan.recompute,
                        plan.sequence_parallel, plan.cp, plan.ep)


TORCHTITAN = RecipeProfile("torchtitan", model_states=torchtitan_model_state_bytes,
                           layer=torchtitan_layer_bytes, logits_loss=torchtitan_logits_loss_bytes,
                           allocator_slack_fraction=EXPANDABLE_SEGMENTS_SLACK_FRACTION,
                           zero_stages=(0, 2, 3),  # DDP, FSDP2 without / with reshard
                           # with pp > 1: DDP, or FSDP2 without reshard (apply_fsdp at 9dec370)
                           pipeline_zero_stages=(0, 2),
                           context_parallel=True,  # experimental.context_parallel_degree
                           workspace_bytes=TORCH_CUBLAS_WORKSPACE_BYTES, fsdp_stream_pools=True,
                           pipeline_split=torchtitan_split,
                           # torch.distributed.pipelining, as the reference trainer's pipelines
                           plan_as_run=torchtitan_plan_as_run,
                           pipeline_buffers=pipeline_buffer_bytes,
                           pipeline_grads_after_first_backward=True)


# ---------------------------------------------------------------- DeepSpeed (ZeRO)

def deepspeed_model_state_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, params: int,
                                grads_live: bool, sub_group_elements: int | None = None
                                ) -> dict[str, int]:
    """DeepSpeed's optimizer wrappers (deepspeed/runtime/engine.py, _do_optimizer_sanity_check
    picks one from the ZeRO stage and data_types.grad_accum_dtype, which recipe.grad_dtype is):

    - ZeRO-1 with fp32 gradient accumulation: BF16_Optimizer (bf16_optimizer.py): the 16-bit
      model, a persistent full-size fp32 gradient buffer (fp32_groups_gradients_flat; the
      master partition's grad is a view of it), fp32 master partition + Adam: 2 + 4 + 12/dp;
    - ZeRO-1/2 with 16-bit accumulation (zero/stage_1_and_2.py): the 16-bit model, 16-bit
      grads (whole for ZeRO-1, this rank's partition for ZeRO-2: averaged_gradients), the fp32
      partition's grad made at the step (single_partition_of_fp32_groups[i].grad) and fp32
      master partition + Adam: 2 + (2 | 2/dp) + 4/dp + 12/dp;
    - ZeRO-0 (no ZeRO): FP16_Optimizer (fp16/fused_optimizer.py) for 16-bit accumulation, 2 + 2
      + 4 (fp32 grads at the step) + 12; fp32 accumulation is refused by DeepSpeed without ZeRO
      and is modelled as BF16_Optimizer over one rank;
    - ZeRO-3 (zero/stage3.py): 16-bit parameter partition (fp16_partitioned_groups_flat) and
      gradient partition (grad_partitions_flat_buffer), fp32 master partition + Adam:
      (2 + 2 + 12) / dp, and at the step the fp32 grad of one sub-group at a time
      (deepspeed_stage3_step_grad_bytes).
    The reduce buckets are a term of their own (deepspeed_reduce_bucket_bytes).
    sub_group_elements: the job's zero_optimization.sub_group_size (None: DeepSpeed's default).
    """
    dp, e = plan.dp, _act_bytes(recipe)
    moments = OPTIMIZER_MOMENT_BYTES[recipe.optimizer]
    shard = -(-params // dp)
    fp32_accum = recipe.grad_dtype == "fp32" and recipe.precision != "fp32"

    def step_grad(n: int) -> int:  # the fp32 grad of the master partition, made at the step
        return _r(n * FP32_BYTES) if grads_live else 0

    if plan.zero == 3:
        step = deepspeed_stage3_step_grad_bytes(arch, recipe, plan, shard, sub_group_elements) \
            if grads_live else 0
        return {"parameters": _r(shard * e), "gradients": _r(shard * e) + step,
                "optimizer_states": _r(shard * FP32_BYTES) + (moments // 4) * _r(shard * 4)}
    opt = shard if plan.zero >= 1 else params
    states = _r(opt * FP32_BYTES) + (moments // 4) * _r(opt * 4)
    if fp32_accum and plan.zero <= 1:
        return {"parameters": _r(params * e), "gradients": _r(params * FP32_BYTES),
                "optimizer_states": states}
    grads = _r(shard * e) if plan.zero == 2 else _r(params * e)
    return {"parameters": _r(params * e), "gradients": grads + step_grad(opt),
            "optimizer_states": states}


# DeepSpeed's default zero_optimization.sub_group_size, in elements (zero/config.py,
# DeepSpeedZeroConfig.sub_group_size: pp_int(1e9)).
DEEPSPEED_SUB_GROUP_ELEMENTS = 1_000_000_000


def deepspeed_stage3_step_grad_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                     shard: int, sub_group_elements: int | None = None) -> int:
    """ZeRO-3's step updates one sub-group of the rank's partition at a time (stage3.py `step`:
    _prepare_sub_group, the optimizer step, _release_sub_group, which sets the fp32 partition's
    grad back to None). _prepare_fp32_grad_for_sub_group makes the fp32 grad as
    `self.flatten(averaged_gradients).to(fp32)`: a flat 16-bit copy of the sub-group's
    gradients and its fp32 copy are live together, (2 + 4) B per element of the largest
    sub-group. _create_fp16_sub_groups closes a sub-group at the first parameter that takes it
    to sub_group_size elements or more, so the largest is under sub_group_size plus one
    parameter's partition (the largest matrix: the embedding or an MLP projection)."""
    sub_group = sub_group_elements or DEEPSPEED_SUB_GROUP_ELEMENTS
    largest_param = -(-max(arch.vocab_size, arch.ffn_hidden_size, arch.moe_ffn_hidden_size)
                      * arch.hidden_size // plan.dp)
    elements = min(shard, sub_group + largest_param)
    return _r(elements * _act_bytes(recipe)) + _r(elements * FP32_BYTES)


def hf_logits_loss_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                         seq_len: int) -> int:
    """ForCausalLMLoss upcasts the logits (`logits = logits.float()`,
    transformers/loss/loss_utils.py) and calls nn.functional.cross_entropy. In the forward the
    16-bit logits, their fp32 copy and the saved log-softmax are live (2 + 4 + 4 B per logit);
    Trainer.compute_loss drops the model output before backward (it returns the loss alone
    unless return_outputs), so backward holds the saved log-softmax and two fp32 gradients:
    12 B per logit, the larger, and the reference trainer's term."""
    return logits_loss_bytes(arch, recipe, plan, seq_len)


# ---------------------------------------------------------------- HF transformers modules

def hf_sdpa_repeated_kv_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                              seq_len: int) -> int:
    """What a grouped-query attention layer of transformers saves beyond the reference term's
    k and v under SDPA: transformers repeats K and V to every query head before calling
    scaled_dot_product_attention, and SDPA saves its inputs for backward.

    transformers 4.40 models/llama/modeling_llama.py LlamaSdpaAttention.forward (Qwen2, Mistral,
    Mixtral copy it): `key_states = repeat_kv(key_states, self.num_key_value_groups)`, the same
    for the values; repeat_kv is `expand(...).reshape(...)`, a copy, since the expanded view is
    not viewable (the rotated k and the v_proj output are then freed: nothing else keeps them).
    Current transformers (integrations/sdpa_attention.py sdpa_attention_forward) repeats
    unless `use_gqa_in_sdpa` (torch >= 2.5 and no attention mask: SDPA's enable_gqa), i.e.
    whenever the batch is padded, as the Trainer's collators pad. The reference term counts k
    and v at kv_dim (its own attention takes GQA natively), and already repeats them for eager
    attention. Per layer: 2 x tokens x (q_dim - kv_dim) 16-bit values over tp; none without
    GQA (Qwen1.5-0.5B) and for GPT-2."""
    if recipe.attention == "eager" or arch.family == "gpt2" or arch.kv_dim == arch.q_dim:
        return 0
    tokens, e, t = _tokens(plan, seq_len), _act_bytes(recipe), plan.tp
    return 2 * (_r(tokens * arch.q_dim * e // t) - _r(tokens * arch.kv_dim * e // t))


def hf_layer_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                   seq_len: int, sdpa_native_gqa: bool = False) -> tuple[int, int]:
    """A transformers decoder layer (what DeepSpeed and the HF Trainer run) saves the reference
    layer's tensors, except in its two RMSNorms. LlamaRMSNorm (models/llama/modeling_llama.py;
    Mistral, Qwen2, Mixtral, Qwen2-MoE and Phi-3 copy it) runs eagerly:
    `x.to(float32)`, `x.pow(2).mean(-1)`, `x * torch.rsqrt(variance + eps)`,
    `weight * x.to(input_dtype)`: autograd keeps the fp32 input (pow and mul) and the normalised
    16-bit tensor (the weight's product), where the reference's fused norm keeps the 16-bit
    input: 4 B more per element, per norm. Their RoPE (q * cos + rotate_half(q) * sin) keeps
    only cos and sin (no grad), like the reference. GPT-2 uses nn.LayerNorm (fused: the
    reference term); Gemma's norm differs and is not re-derived (the reference term).
    A q/k norm (arch.qk_norm; models/qwen3/modeling_qwen3.py Qwen3Attention:
    `self.q_norm(self.q_proj(hidden_states).view(hidden_shape))`, the same for k; Qwen3RMSNorm
    is LlamaRMSNorm) saves the fp32 copy and the normalised 16-bit tensor of every q and k
    element, 6 B each, where the q_proj and k_proj outputs were not saved (the attention saves
    the rotated q and k, in the reference term).
    Under SDPA a grouped-query layer saves K and V repeated to every query head
    (hf_sdpa_repeated_kv_bytes), unless sdpa_native_gqa: the model calls SDPA with enable_gqa
    (current transformers with torch >= 2.5 and no attention mask).
    Full recompute keeps the block input only; the recomputed layer running backward holds the
    norms' tensors and the repeated K and V again."""
    saved, live = layer_bytes(arch, recipe, plan, seq_len)
    repeated = 0 if sdpa_native_gqa else hf_sdpa_repeated_kv_bytes(arch, recipe, plan, seq_len)
    saved += 0 if plan.recompute == "full" else repeated
    live += repeated
    if arch.family in ("gpt2", "gemma"):
        return saved, live
    rep = plan.tp if plan.sequence_parallel else 1
    tokens = _tokens(plan, seq_len)
    norms = 2 * _r(tokens * arch.hidden_size * FP32_BYTES // rep)
    if arch.qk_norm:  # heads split over tp
        qk_elements = tokens * (arch.q_dim + arch.kv_dim) // plan.tp
        norms += _r(qk_elements * (FP32_BYTES + _act_bytes(recipe)))
    return (saved if plan.recompute == "full" else saved + norms), live + norms


# DeepSpeed's default zero_optimization.reduce_bucket_size, in elements (zero/config.py).
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000


def deepspeed_reduce_bucket_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                  at_step: bool, bucket_elements: int | None = None) -> int:
    """The gradient reduce buckets DeepSpeed allocates with contiguous_gradients (on by
    default), reduce_bucket_size elements in the optimizer's 16-bit dtype:

    - ZeRO-1/2 (zero/stage_1_and_2.py setup_buckets): one at the first gradient hook of each
      micro-step (a second with overlap_comm, whose default is off below ZeRO-3), released by
      _release_ipg_buffers at the step: held through backward, not at the step;
    - ZeRO-3 (zero/stage3.py, after initialize_optimizer_states): one, kept for the run.
    ZeRO-0 has none. DeepSpeedExamples#336 (a maintainer) names this buffer as why ZeRO-2 peaks
    above ZeRO-1 when activations dominate. bucket_elements: the job's reduce_bucket_size
    (None: DeepSpeed's default, zero/config.py ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT).
    """
    if plan.zero == 0 or (plan.zero < 3 and at_step):
        return 0
    return _r((bucket_elements or DEEPSPEED_REDUCE_BUCKET_ELEMENTS) * _act_bytes(recipe))


def hf_reduce_bucket_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                           at_step: bool, bucket_elements: int | None = None) -> int:
    """With a ZeRO stage the Trainer fills reduce_bucket_size "auto" with hidden_size²
    (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_finalize);
    DeepSpeed's buckets otherwise; bucket_elements: a size the job's config sets itself.
    No ZeRO: DDP's buckets are in hf_model_state_bytes."""
    return deepspeed_reduce_bucket_bytes(arch, recipe, plan, at_step,
                                         bucket_elements or arch.hidden_size * arch.hidden_size)


def deepspeed_saved_weight_view_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                      block: int | None) -> int:
    """Gathered 16-bit weights that autograd keeps alive under ZeRO-3 when DeepSpeed's
    memory-efficient linear is not in place, beyond what the FSDP-style gathering terms count.

    deepspeed.zero.Init installs LinearFunctionForZeroStage3 as torch.nn.functional.linear when
    its context is entered (zero/partition_parameters.py, __enter__ -> patch_init_and_builtins);
    it saves the weight Parameter itself, so free_param (`param.data = torch.empty(0)`) releases
    the all-gather buffer (zero/linear.py: "Allowing us to retrieve the variable without creating
    pointer to it"). A model built outside that context (the HF Trainer's: from_pretrained before
    TrainingArguments names the DeepSpeed config, so is_deepspeed_zero3_enabled() is still
    False) runs torch's linear, whose backward saves the transposed weight: a view that keeps the
    gathered buffer alive after free_param, until that linear's backward. So:

    - no recompute: every layer's gathered weights stay from its forward to its backward. At the
      loss (block None) all but the last layer's, which the gathering terms count; while block
      `block` runs backward, blocks 0..block still hold theirs, block's beside its re-gather;
    - full recompute (the layers run forward under no_grad): only the layer running backward
      keeps its recomputed forward's copy beside the re-gather;
    - one rank: nothing is gathered (partition_parameters.py, `_no_gather_coalesced`).
    Selective recompute (not an HF Trainer mode) is counted as none, the larger.
    The embedding's backward saves no weight; the output layer's copy is in the gathering terms
    (the root's weights, gathered through backward). Norm weights are left in (a few KiB).
    """
    if plan.zero != 3 or plan.dp == 1:
        return 0
    layer = _r(-(-rank_layer_params(arch, plan) // plan.tp) * _act_bytes(recipe))
    if plan.recompute == "full":
        return 0 if block is None else layer
    layers = arch.num_layers // plan.pp
    return (layers - 1) * layer if block is None else (block + 1) * layer


def deepspeed_grad_numels(arch: ModelArch, plan: ParallelPlan) -> list[int]:
    """The parameter tensors of one tp rank of a (single-stage) transformers model, in the order
    their gradients reach ZeRO-3's reduce hook in backward: the untied head and the final norm,
    then each layer from the last (MLP projections, post-attention norm, attention output,
    v, k, q and their biases, input norm), the embedding last (a tied one's hook fires after its
    second use, the embedding's backward). GPT-2: its fused c_attn and biased MLP.
    Mixture-of-experts layers: each routed expert's three projections (over ep), the router."""
    h, f, t = arch.hidden_size, arch.ffn_hidden_size, plan.tp
    q, kv = arch.q_dim, arch.kv_dim
    if arch.family == "gpt2":
        layer = [f * h, h, h * f, f, 2 * h, q * h, h, h * (q + 2 * kv), q + 2 * kv, 2 * h]
    else:
        if arch.is_moe:
            mlp = [arch.moe_ffn_hidden_size * h] * (3 * (arch.num_experts // plan.ep)) \
                + [h * arch.num_experts]
            shared = arch.shared_expert_ffn_hidden_size
            mlp += [shared * h] * 3 + [h] if shared else []
        else:
            mlp = [f * h] * 3
        bias = [kv, kv, q] if arch.qkv_bias else []
        qk_norm = [arch.head_dim, arch.head_dim] if arch.qk_norm else []
        layer = [*mlp, h, q * h, kv * h, kv * h, h * q, *bias, *qk_norm, h]
    head = [] if arch.tied_embeddings else [arch.vocab_size * h]
    final_norm = [h, h] if arch.family == "gpt2" else [h]
    embedding = [arch.vocab_size * h] + ([arch.max_position_embeddings * h]
                                         if arch.family == "gpt2" else [])
    numels = [*head, *final_norm, *layer * (arch.num_layers // plan.pp), *embedding]
    return [-(-n // t) for n in numels]


def deepspeed_reduce_scatter_copy_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                        bucket_elements: int | None = None) -> tuple[int, int]:
    """ZeRO-3's padded copies of its gradient buckets for the reduce-scatter: (the largest made
    while the layers run backward, the largest at all, the end of backward's included).

    stage3.py `reduce_independent_p_g_buckets_and_remove_grads` adds each gradient to the ipg
    bucket and first reduces the bucket when this gradient would take it past reduce_bucket_size
    elements (a gradient larger than the bucket still joins it, uncopied);
    `independent_gradient_partition_epilogue` reduces the last bucket after backward. With
    reduce_scatter on (zero/config.py default) `__reduce_and_partition_ipg_grads` takes
    `__avg_scatter_grads` -> comm/coalesced_collectives.py `reduce_scatter_coalesced`, which
    interleaves every gradient's rank chunks, padded to dp, into one new buffer (`torch.cat`)
    unless the bucket is one gradient that dp divides: a 16-bit copy of the bucket, live while
    it is reduced and partitioned (stage3.py `partition_grads` copies out of it), allocated on
    `reduce_and_partition_stream` (overlap_comm, on by default at stage 3), so freed into that
    stream's pool. On one rank too (world size 1 still concatenates)."""
    bucket = bucket_elements or DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    dp, e = plan.dp, _act_bytes(recipe)

    def copy(grads: list[int]) -> int:
        if len(grads) == 1 and grads[0] % dp == 0:
            return 0
        return _r(sum(-(-n // dp) * dp for n in grads) * e)

    in_backward, grads, elements = 0, [], 0
    for n in deepspeed_grad_numels(arch, plan):
        if elements + n > bucket and elements > 0:
            in_backward = max(in_backward, copy(grads))
            grads, elements = [], 0
        grads.append(n)
        elements += n
    return in_backward, max(in_backward, copy(grads))


def deepspeed_fp16_overflow_check_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                        params: int) -> int:
    """The fp16 overflow check at the start of ZeRO-3's step, on the reduce-and-partition stream.

    DeepSpeed 0.14.2 zero/stage3.py `step` -> `_overflow_check_and_loss_scale_update` runs
    `check_overflow` when the model is fp16 (`if self.dtype == torch.float16`; bf16 skips it),
    and `has_overflow(partition_gradients=True)` runs, `with get_accelerator().stream(
    self.reduce_and_partition_stream)`, `torch.isinf(self.grad_partitions_flat_buffer).any()`
    then `torch.isnan(...).any()` over the rank's whole gradient partition. ATen's isinf is
    `self.abs() == infinity` (aten/src/ATen/native/TensorCompare.cpp, `isinf`): a 16-bit copy of
    the partition (the buffer's dtype, the gradient-accumulation dtype, the model's by default:
    engine.py get_data_types) and a bool tensor of as many elements are live together, 3 B per
    element; isnan (`self != self`) then needs the bool only. The stream is a side stream at
    stage 3 (zero/config.py overlap_comm_valid: on by default at stage 3), so these blocks go to
    its pool. One rank too (the buffer exists with a world size of 1). Before the sub-group loop:
    no fp32 gradient copy is live beside it."""
    if plan.zero != 3 or recipe.precision != "fp16":
        return 0
    shard = -(-params // plan.dp)
    return _r(shard * _act_bytes(recipe)) + _r(shard)


def deepspeed_stream_pool_bytes(plan: ParallelPlan, gathered_max: int, copy_max: int) -> int:
    """What the caching allocator keeps reserved in ZeRO-3's side-stream pools: each pool's
    high water over the step, whichever phase reached it, since a freed block is reused only for
    the stream that allocated it (c10/cuda/CUDACachingAllocator.cpp); the same cause as FSDP2's
    pools (memory.fsdp_stream_pool_bytes). estimate_memory adds them to the compute stream's own
    high water (each phase less what it holds in these pools).

    - all-gather stream: partitioned_param_coordinator.py `__all_gather_params_` runs
      `all_gather_coalesced` under `with get_accelerator().stream(self.__allgather_stream)`,
      which allocates each gathered 16-bit buffer there (partition_parameters.py, `param_buffer =
      torch.empty(...)`, `_all_gather_dtype`); `free_param` returns it to that pool. Its high
      water is the most weights gathered at once (`gathered_max`, the largest of the phases'
      gathered weights, saved views included); none on one rank (`_no_gather_coalesced`);
    - reduce-and-partition stream: the largest bucket copy of reduce_scatter_coalesced
      (deepspeed_reduce_scatter_copy_bytes's second value) or the fp16 overflow check's
      temporaries (deepspeed_fp16_overflow_check_bytes), whichever is larger (`copy_max`),
      on one rank too.
    The ipg bucket itself and the gradient partitions are allocated at start-up on the compute
    stream (stage3.py `_setup_for_real_optimizer`) and count in the allocated peak."""
    if plan.zero != 3:
        return 0
    return (gathered_max if plan.dp > 1 else 0) + copy_max


# ZeRO-3 fetches each module's partitioned parameters before it runs and releases them after,
# with prefetching (partitioned_param_coordinator.py): modelled as FSDP's ZeRO-3 gathering.
# The fp32 gradient copy is made inside the step and freed there (stage_1_and_2.py `step`:
# `single_partition_of_fp32_groups[i].grad = None` after _optimizer_step; stage3.py
# `_release_sub_group`): accumulating micro-batches add into the 16-bit gradients only.
DEEPSPEED = RecipeProfile("deepspeed", model_states=deepspeed_model_state_bytes,
                          layer=hf_layer_bytes, logits_loss=hf_logits_loss_bytes, fsdp_stages=(3,),
                          reduce_buckets=deepspeed_reduce_bucket_bytes,
                          workspace_bytes=TORCH_CUBLAS_WORKSPACE_BYTES, step_only_grads=True,
                          saved_weight_views=deepspeed_saved_weight_view_bytes,
                          reduce_scatter_copies=deepspeed_reduce_scatter_copy_bytes,
                          stream_pools=deepspeed_stream_pool_bytes,
                          overflow_check=deepspeed_fp16_overflow_check_bytes)


# ---------------------------------------------------------------- HF Trainer (AMP + DDP)

def hf_model_state_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, params: int,
                         grads_live: bool, sub_group_elements: int | None = None
                         ) -> dict[str, int]:
    """Trainer(bf16=True) without DeepSpeed/FSDP: fp32 weights under torch.autocast, whose
    16-bit casts of every weight are saved by the linears for backward (2 B/param), fp32 grads
    (4 B/param), torch.optim.AdamW moments (8 B/param), and with more than one GPU DDP's fp32
    gradient buckets (4 B/param; torch/nn/parallel/distributed.py, gradient_as_bucket_view
    False by default). About 22 B/param. With a ZeRO stage the Trainer hands the model to
    DeepSpeed (transformers/integrations/deepspeed.py): DeepSpeed's states apply."""
    if plan.zero > 0 or recipe.precision == "fp32":
        return deepspeed_model_state_bytes(arch, recipe, plan, params, grads_live,
                                           sub_group_elements) if plan.zero > 0 else model_state_bytes(arch, recipe, plan, params, grads_live)
    moments = OPTIMIZER_MOMENT_BYTES[recipe.optimizer]
    buckets = _r(params * FP32_BYTES) if plan.dp > 1 else 0
    return {"parameters": _r(params * FP32_BYTES) + _r(params * _act_bytes(recipe)),
            "gradients": _r(params * FP32_BYTES) + buckets,
            "optimizer_states": (moments // 4) * _r(params * 4)}


def hf_reduce_scatter_copy_bytes(arch: ModelArch, recipe: Recipe, plan: ParallelPlan,
                                 bucket_elements: int | None = None) -> tuple[int, int]:
    """DeepSpeed's bucket copies with the Trainer's bucket size (hf_reduce_bucket_bytes)."""
    return deepspeed_reduce_scatter_copy_bytes(arch, recipe, plan, bucket_elements
                                               or arch.hidden_size * arch.hidden_size)


# AMP + DDP keeps its fp32 grads whatever grads_live says; with ZeRO, DeepSpeed's step-only copy.
HF = RecipeProfile("hf", model_states=hf_model_state_bytes, layer=hf_layer_bytes,
                   logits_loss=hf_logits_loss_bytes, fsdp_stages=(3,),
                   reduce_buckets=hf_reduce_bucket_bytes, workspace_bytes=TORCH_CUBLAS_WORKSPACE_BYTES,
                   step_only_grads=True, saved_weight_views=deepspeed_saved_weight_view_bytes,
                   reduce_scatter_copies=hf_reduce_scatter_copy_bytes,
                   stream_pools=deepspeed_stream_pool_bytes,
                   overflow_check=deepspeed_fp16_overflow_check_bytes)

PROFILES: dict[str, RecipeProfile] = {p.name: p for p in (MEGATRON, TORCHTITAN, DEEPSPEED, HF)}
