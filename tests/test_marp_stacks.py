"""Unit tests of the training stacks' recipe profiles (frenzy_predictor.stacks), term by term."""
from __future__ import annotations

from dataclasses import replace

import pytest

from frenzy.catalog.models import model_catalog
from frenzy.domain import ParallelPlan, Recipe
from frenzy_predictor import stacks
from frenzy_predictor.memory import (FRAMEWORKS, estimate_memory, layer_bytes, logits_loss_bytes,
                                     model_state_bytes, pipeline_in_flight)

LLAMA3_8B = model_catalog()["llama3-8b"]
GPT2 = model_catalog()["gpt2"]
R = Recipe()


def states(fn, plan, params=10**9, live=True):
    return sum(fn(LLAMA3_8B, R, plan, params, live).values())


def test_megatron_logits_loss_is_six_bytes_per_logit_half_the_reference():
    plan = ParallelPlan(micro_batch=2)
    logits = 2 * 4096 * LLAMA3_8B.vocab_size
    assert stacks.megatron_logits_loss_bytes(LLAMA3_8B, R, plan, 4096) == pytest.approx(6 * logits, rel=1e-6)
    assert logits_loss_bytes(LLAMA3_8B, R, plan, 4096) == pytest.approx(12 * logits, rel=1e-6)
    tp = ParallelPlan(tp=4, micro_batch=2)  # vocab-parallel: split over tp
    assert stacks.megatron_logits_loss_bytes(LLAMA3_8B, R, tp, 4096) == pytest.approx(6 * logits / 4, rel=1e-4)


def test_megatron_model_states_distributed_optimizer_shards_masters_keeps_fp32_main_grad():
    n = 10**9
    assert states(stacks.megatron_model_state_bytes, ParallelPlan()) == pytest.approx(18 * n, rel=1e-6)
    dist = stacks.megatron_model_state_bytes(LLAMA3_8B, R, ParallelPlan(dp=8, zero=1), n, True)
    assert dist["gradients"] == pytest.approx(4 * n, rel=1e-6)  # main_grad, not sharded
    assert dist["optimizer_states"] == pytest.approx(12 * n / 8, rel=1e-6)
    # Megatron has no ZeRO-2/3 on this path: asking for them gives the distributed optimizer
    assert states(stacks.megatron_model_state_bytes, ParallelPlan(dp=8, zero=3)) == \
        states(stacks.megatron_model_state_bytes, ParallelPlan(dp=8, zero=1))


def test_torchtitan_selective_saves_every_other_matmul_about_62_kb_per_token_for_llama3_8b():
    plan = ParallelPlan(micro_batch=1, recompute="selective")
    saved, live = stacks.torchtitan_layer_bytes(LLAMA3_8B, R, plan, 8192)
    per_token = saved / 8192
    assert 60_000 < per_token < 64_000  # input, wq, wv, sdpa out + lse, w1, w2
    reference_selective, _ = layer_bytes(LLAMA3_8B, R, plan, 8192)
    assert reference_selective / 8192 > 160_000  # MARP's own selective keeps far more
    full, _ = stacks.torchtitan_layer_bytes(LLAMA3_8B, R, ParallelPlan(recompute="full"), 8192)
    assert full < saved < live  # the recomputed layer is live in backward


def test_torchtitan_reserved_peak_has_less_slack_than_the_reference():
    """Expandable segments: less rounding slack (without FSDP, whose side-stream pools add
    their own reserved bytes: test_torchtitan_reserved_peak_keeps_fsdp2_side_stream_pools)."""
    plan = ParallelPlan(dp=8, zero=0, micro_batch=1, recompute="full")
    tt = estimate_memory(LLAMA3_8B, R, plan, 8192, framework="torchtitan")
    ref = estimate_memory(LLAMA3_8B, R, plan, 8192)
    assert tt.peak_reserved_bytes - tt.peak_allocated_bytes < \
        ref.peak_reserved_bytes - ref.peak_allocated_bytes
    assert tt.framework == "torchtitan"


def test_deepspeed_zero3_keeps_16bit_param_and_grad_shards_beside_fp32():
    """16-bit param and grad partitions, fp32 master + Adam (16 B / dp), and at the step a
    shard under one sub-group: its flat 16-bit copy and fp32 grad together (6 B / dp)."""
    n, dp = 10**9, 8
    z3 = states(stacks.deepspeed_model_state_bytes, ParallelPlan(dp=dp, zero=3), n)
    assert z3 == pytest.approx(22 * n / dp, rel=1e-5)
    assert z3 > states(model_state_bytes, ParallelPlan(dp=dp, zero=3), n)  # FSDP2: 16 B / dp
    between_steps = states(stacks.deepspeed_model_state_bytes, ParallelPlan(dp=dp, zero=3), n,
                           live=False)
    assert between_steps == pytest.approx(16 * n / dp, rel=1e-5)


def test_deepspeed_zero3_steps_one_sub_group_at_a_time():
    """stage3.py makes the fp32 grad per sub-group (sub_group_size elements, closed at the
    parameter that reaches it) and frees it before the next: a shard larger than a sub-group
    pays (2 + 4) B for the largest sub-group only; sub_group_size 1e12 makes it the shard."""
    plan, shard = ParallelPlan(dp=4, zero=3), 2 * 10**9
    largest = -(-LLAMA3_8B.vocab_size * LLAMA3_8B.hidden_size // 4)
    step = stacks.deepspeed_stage3_step_grad_bytes(LLAMA3_8B, R, plan, shard)
    assert step == pytest.approx(6 * (stacks.DEEPSPEED_SUB_GROUP_ELEMENTS + largest), rel=1e-5)
    whole = stacks.deepspeed_stage3_step_grad_bytes(LLAMA3_8B, R, plan, shard, 10**12)
    assert whole == pytest.approx(6 * shard, rel=1e-5)
    full = replace(plan, recompute="full", micro_batch=1)  # activations small: the step peaks
    one_sub_group = estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), full, 2048,
                                    grad_accum=1, framework="deepspeed", sub_group_elements=10**12)
    default = estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), full, 2048, grad_accum=1,
                              framework="deepspeed")
    # one sub-group of 2e9 elements: the step is the peak; 1e9 ones: a layer's backward is
    assert one_sub_group.peak_phase == "optimizer" != default.peak_phase
    assert one_sub_group.peak_allocated_bytes > default.peak_allocated_bytes
    with pytest.raises(ValueError, match="sub_group_elements"):
        estimate_memory(LLAMA3_8B, R, plan, 2048, framework="torchtitan", sub_group_elements=10**9)


@pytest.mark.parametrize("framework,zero", [("deepspeed", 2), ("deepspeed", 3), ("hf", 3)])
def test_deepspeed_fp32_step_grads_are_not_held_in_backward_when_accumulating(framework, zero):
    """DeepSpeed makes the fp32 gradient copy inside the step and frees it there
    (stage_1_and_2.py step, stage3.py _release_sub_group): micro-batches accumulate into the
    16-bit gradients, so a backward-phase peak is the same with 1 or 8 micro-batches per step,
    where FSDP-style stacks keep their sharded grads from the first backward on."""
    plan = ParallelPlan(dp=8, zero=zero, micro_batch=1)
    one, eight = (estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), plan, 4096,
                                  grad_accum=accum, framework=framework) for accum in (1, 8))
    assert "backward" in one.peak_phase and "backward" in eight.peak_phase
    assert one.breakdown["gradients"] == eight.breakdown["gradients"]
    fsdp_one, fsdp_eight = (estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=8, zero=3, micro_batch=1),
                                            4096, grad_accum=a, framework="torchtitan")
                            for a in (1, 8))
    assert fsdp_eight.breakdown["gradients"] > fsdp_one.breakdown["gradients"]


def test_deepspeed_zero1_and_2_follow_the_optimizer_deepspeed_picks():
    n, dp = 10**9, 8
    # fp32 accumulation (recipe.grad_dtype fp32): BF16_Optimizer's full-size fp32 grad buffer
    z1 = stacks.deepspeed_model_state_bytes(LLAMA3_8B, R, ParallelPlan(dp=dp, zero=1), n, False)
    assert (z1["parameters"], z1["gradients"], z1["optimizer_states"]) == \
        pytest.approx((2 * n, 4 * n, 12 * n / dp), rel=1e-6)
    bf16 = Recipe(grad_dtype="16bit")
    z1 = stacks.deepspeed_model_state_bytes(LLAMA3_8B, bf16, ParallelPlan(dp=dp, zero=1), n, True)
    assert z1["gradients"] == pytest.approx(2 * n + 4 * n / dp, rel=1e-6)  # + fp32 partition grad
    z2 = stacks.deepspeed_model_state_bytes(LLAMA3_8B, bf16, ParallelPlan(dp=dp, zero=2), n, True)
    assert z2["gradients"] == pytest.approx(6 * n / dp, rel=1e-6)
    assert z2["parameters"] == pytest.approx(2 * n, rel=1e-6)  # ZeRO-2 keeps the whole model


def test_hf_trainer_amp_with_ddp_is_about_22_bytes_per_param():
    n = 10**9
    assert states(stacks.hf_model_state_bytes, ParallelPlan(dp=2), n) == pytest.approx(22 * n, rel=1e-6)
    assert states(stacks.hf_model_state_bytes, ParallelPlan(dp=1), n) == pytest.approx(18 * n, rel=1e-6)
    plan = ParallelPlan(micro_batch=1)
    logits = 4096 * LLAMA3_8B.vocab_size  # the backward's 12 B/logit exceed the forward's 10
    assert stacks.hf_logits_loss_bytes(LLAMA3_8B, R, plan, 4096) == pytest.approx(12 * logits, rel=1e-6)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_profile_orders_its_three_peaks_and_sums_its_breakdown(framework):
    est = estimate_memory(GPT2, R, ParallelPlan(dp=2, zero=1, micro_batch=4), 1024,
                          framework=framework)
    assert est.peak_allocated_bytes < est.peak_reserved_bytes < est.device_peak_bytes
    tensors = {k: v for k, v in est.breakdown.items() if k != "framework_overhead"}
    assert sum(tensors.values()) == est.peak_allocated_bytes


def test_interleaved_pipeline_holds_more_on_the_last_stage_and_stage_selects_a_rank():
    plan = ParallelPlan(pp=4, micro_batch=1)
    assert pipeline_in_flight(plan, 3, accum=8, virtual_stages=1) == 1
    assert pipeline_in_flight(plan, 0, accum=8, virtual_stages=1) == 4
    # v = 2 chunks: last rank warms up (2 - 1) * 4 = 4 chunks, + 1 running: 2.5 stages' worth
    assert pipeline_in_flight(plan, 3, accum=8, virtual_stages=2) == 2.5
    plain = estimate_memory(LLAMA3_8B, R, plan, 4096, framework="megatron", stage=3)
    inter = estimate_memory(LLAMA3_8B, R, plan, 4096, framework="megatron", stage=3,
                            virtual_stages=2)
    assert inter.peak_allocated_bytes > plain.peak_allocated_bytes
    with pytest.raises(ValueError, match="stage"):
        estimate_memory(LLAMA3_8B, R, plan, 4096, stage=4)
    with pytest.raises(ValueError, match="virtual_stages"):
        estimate_memory(LLAMA3_8B, R, plan, 4096, virtual_stages=3)


def test_interleaved_microbatch_group_sets_the_warmup_chunks():
    """--microbatch-group-size-per-virtual-pipeline-stage g replaces pp in the warm-up's
    (v - 1) x g chunks (schedules.py get_pp_rank_microbatches); its default is pp."""
    plan = ParallelPlan(pp=4, micro_batch=1)
    assert pipeline_in_flight(plan, 3, 8, 3, microbatch_group=4) == \
        pipeline_in_flight(plan, 3, 8, 3) == 9 / 3
    assert pipeline_in_flight(plan, 3, 8, 3, microbatch_group=5) == 11 / 3  # (3 - 1) x 5 + 1
    assert pipeline_in_flight(plan, 0, 8, 3, microbatch_group=5) == 17 / 3  # + (4 - 0 - 1) x 2
    assert pipeline_in_flight(plan, 3, 3, 3, microbatch_group=5) == 9 / 3  # at most accum x v
    layers12 = replace(LLAMA3_8B, num_layers=12)
    default = estimate_memory(layers12, R, plan, 4096, framework="megatron", stage=3,
                              grad_accum=8, virtual_stages=3)
    group5 = estimate_memory(layers12, R, plan, 4096, framework="megatron", stage=3,
                             grad_accum=8, virtual_stages=3, microbatch_group=5)
    assert group5.breakdown["activations"] > default.breakdown["activations"]
    with pytest.raises(ValueError, match="microbatch_group"):
        estimate_memory(layers12, R, plan, 4096, virtual_stages=3, microbatch_group=0)


def _spec(**training):
    from frenzy.jobspec import JobSpecModel

    return JobSpecModel.model_validate({
        "name": "j", "model": "gpt2",
        "training": {"seq_len": 512, "global_batch_size": 8, "steps": 10, **training}}).to_proto()


def test_job_spec_carries_the_framework_into_the_recipe_and_names_a_bad_one():
    from frenzy.jobspec import SpecError, resolve_spec

    assert resolve_spec(_spec()).training.recipe.framework == "frenzy"
    job = resolve_spec(_spec(framework="torchtitan"))
    assert job.training.recipe.framework == "torchtitan"
    with pytest.raises(SpecError) as err:
        resolve_spec(_spec(framework="jax"))
    assert err.value.field == "training.framework"


def test_the_planner_plans_with_the_specs_framework():
    """Megatron's in-place loss needs less than the reference trainer's: its plans never need
    more memory per GPU for the same plan."""
    from frenzy_predictor.planner import plan_job

    options, _ = plan_job(_spec(framework="megatron"))
    assert options
    plan = options[0].plan
    ref = estimate_memory(GPT2, R, plan, 512, grad_accum=plan.grad_accum(8))
    meg = estimate_memory(GPT2, Recipe(framework="megatron"), plan, 512, grad_accum=plan.grad_accum(8))
    assert options[0].peak_bytes_per_gpu == meg.device_peak_bytes <= ref.device_peak_bytes


def test_stages_a_stack_lacks_are_neither_searched_nor_gathered_fsdp_style():
    """Megatron has no ZeRO-2/3 on its path: asking for one is its distributed optimizer, with no
    FSDP gathering; DeepSpeed ZeRO-2 keeps whole 16-bit weights; its ZeRO-3 keeps a 16-bit shard
    besides the gathered block."""
    meg = Recipe(framework="megatron")
    z1, z3 = (estimate_memory(LLAMA3_8B, meg, ParallelPlan(dp=8, zero=z), 2048) for z in (1, 3))
    assert z1 == z3
    ds = Recipe(framework="deepspeed")
    z2 = estimate_memory(LLAMA3_8B, ds, ParallelPlan(dp=8, zero=2, micro_batch=1), 2048)
    assert z2.breakdown["parameters"] == pytest.approx(2 * LLAMA3_8B.num_params(), rel=1e-4)
    z3 = estimate_memory(LLAMA3_8B, ds, ParallelPlan(dp=8, zero=3, micro_batch=1), 2048)
    fsdp = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=8, zero=3, micro_batch=1), 2048)
    # ZeRO-3 gathers one block at a time: at the loss and in a layer's backward (where
    # DeepSpeed's bucket copy may move its peak) the same weights are gathered
    assert fsdp.peak_phase == "backward" and z3.peak_phase in ("backward", "layer_30_backward")
    shard = 2 * LLAMA3_8B.num_params() / 8
    assert z3.breakdown["parameters"] == pytest.approx(fsdp.breakdown["parameters"] + shard, rel=1e-3)
    from frenzy.catalog.gpus import get_gpu
    from frenzy.domain import TrainingSpec
    from frenzy_predictor.plans import enumerate_options

    options = enumerate_options(LLAMA3_8B, TrainingSpec(2048, 64, 64 * 2048 * 10, meg),
                                [get_gpu("H100-80GB")])
    assert options and all(o.plan.zero <= 1 for o in options)


def test_megatron_deferred_output_wgrad_keeps_logit_grad_and_input_per_micro_batch():
    plan = ParallelPlan(tp=2, micro_batch=2)
    tokens = 2 * 4096
    per_mb = stacks.megatron_deferred_output_wgrad_bytes(LLAMA3_8B, R, plan, 4096)
    assert per_mb == pytest.approx(2 * tokens * (LLAMA3_8B.vocab_size / 2 + LLAMA3_8B.hidden_size),
                                   rel=1e-4)
    sp = ParallelPlan(tp=2, micro_batch=2, sequence_parallel=True)  # the input is SP-sharded
    assert per_mb - stacks.megatron_deferred_output_wgrad_bytes(LLAMA3_8B, R, sp, 4096) == \
        pytest.approx(tokens * LLAMA3_8B.hidden_size, rel=1e-4)


@pytest.mark.parametrize("accum", [2, 4, 8])
def test_deferred_output_wgrad_grows_the_last_stage_with_the_micro_batches_deferred(accum):
    plan = ParallelPlan(dp=2, tp=2, pp=2, micro_batch=1)

    def est(stage, defer):
        return estimate_memory(LLAMA3_8B, R, plan, 4096, grad_accum=accum, framework="megatron",
                               stage=stage, defer_output_wgrad=defer)

    per_mb = stacks.megatron_deferred_output_wgrad_bytes(LLAMA3_8B, R, plan, 4096)
    grown = est(1, True).peak_allocated_bytes - est(1, False).peak_allocated_bytes
    assert (accum - 1) * per_mb <= grown <= accum * per_mb
    assert est(1, True).breakdown["deferred_output_wgrad"] in ((accum - 1) * per_mb, accum * per_mb)
    assert est(0, True) == est(0, False)  # only the last stage holds the output layer


def test_deferred_output_wgrad_needs_a_pipeline_and_megatron():
    with pytest.raises(ValueError, match="defer_output_wgrad"):
        estimate_memory(LLAMA3_8B, R, ParallelPlan(tp=2), 4096, framework="megatron",
                        defer_output_wgrad=True)
    with pytest.raises(ValueError, match="defer_output_wgrad"):
        estimate_memory(LLAMA3_8B, R, ParallelPlan(pp=2), 4096, framework="torchtitan",
                        defer_output_wgrad=True)


@pytest.mark.parametrize("zero,in_backward,at_step", [(0, 0, 0), (1, 1, 0), (2, 1, 0), (3, 1, 1)])
def test_deepspeed_reduce_buckets_follow_the_stage(zero, in_backward, at_step):
    """ZeRO-1/2 allocate reduce_bucket_size 16-bit elements at the first gradient hook and free
    them at the step; ZeRO-3 keeps its bucket; no ZeRO, no bucket."""
    plan = ParallelPlan(dp=8, zero=zero)
    bucket = 2 * stacks.DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    assert stacks.deepspeed_reduce_bucket_bytes(LLAMA3_8B, R, plan, False) == in_backward * bucket
    assert stacks.deepspeed_reduce_bucket_bytes(LLAMA3_8B, R, plan, True) == at_step * bucket


def test_hf_trainer_fills_the_reduce_bucket_with_hidden_squared():
    plan = ParallelPlan(dp=8, zero=2)
    h = LLAMA3_8B.hidden_size
    assert stacks.hf_reduce_bucket_bytes(LLAMA3_8B, R, plan, False) == pytest.approx(2 * h * h, rel=1e-4)
    assert stacks.hf_reduce_bucket_bytes(LLAMA3_8B, R, ParallelPlan(dp=8), False) == 0


def test_deepspeed_estimate_carries_the_bucket_in_backward():
    plan = ParallelPlan(dp=8, zero=2, micro_batch=1, recompute="full")
    est = estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), plan, 4096, grad_accum=8,
                          framework="deepspeed")
    bucket = 2 * stacks.DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    assert est.peak_phase == "backward" and est.breakdown["reduce_buckets"] == bucket
    no_zero = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=8), 4096, framework="deepspeed")
    assert "reduce_buckets" not in no_zero.breakdown


@pytest.mark.parametrize("framework", ["deepspeed", "hf"])
def test_a_job_s_own_reduce_bucket_size_replaces_the_default(framework):
    """A DeepSpeed config that sets zero_optimization.reduce_bucket_size (e.g. 5e7) gets a
    bucket of that many 16-bit elements, and the peak moves by the difference; none, the
    stack's default; a size that is not positive is refused naming the argument."""
    plan = ParallelPlan(dp=8, zero=3, micro_batch=1, recompute="full")
    default = estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), plan, 4096, grad_accum=1,
                              framework=framework)
    own = estimate_memory(LLAMA3_8B, Recipe(grad_dtype="16bit"), plan, 4096, grad_accum=1,
                          framework=framework, reduce_bucket_elements=50_000_000)
    assert own.breakdown["reduce_buckets"] == pytest.approx(2 * 50_000_000, rel=1e-4)
    assert (default.peak_allocated_bytes - own.peak_allocated_bytes
            == default.breakdown["reduce_buckets"] - own.breakdown["reduce_buckets"])
    with pytest.raises(ValueError, match="reduce_bucket_elements"):
        estimate_memory(LLAMA3_8B, R, plan, 4096, framework=framework, reduce_bucket_elements=0)


def test_hf_rmsnorm_keeps_fp32_input_and_normalised_copy_per_norm():
    """Two eager LlamaRMSNorms per layer: 4 B per element more than the fused norm each; none
    for GPT-2's fused LayerNorm; under full recompute only the recomputed layer holds them.
    (SDPA's enable_gqa: no repeated K and V, test_hf_sdpa_repeats_kv_...)"""
    plan = ParallelPlan(micro_batch=2)
    tokens, h = 2 * 4096, LLAMA3_8B.hidden_size
    saved, live = stacks.hf_layer_bytes(LLAMA3_8B, R, plan, 4096, sdpa_native_gqa=True)
    ref_saved, ref_live = layer_bytes(LLAMA3_8B, R, plan, 4096)
    assert saved - ref_saved == pytest.approx(2 * 4 * tokens * h, rel=1e-4)
    assert live - ref_live == pytest.approx(2 * 4 * tokens * h, rel=1e-4)
    full = ParallelPlan(micro_batch=2, recompute="full")
    assert stacks.hf_layer_bytes(LLAMA3_8B, R, full, 4096)[0] == layer_bytes(LLAMA3_8B, R, full, 4096)[0]
    assert stacks.hf_layer_bytes(GPT2, R, plan, 1024) == layer_bytes(GPT2, R, plan, 1024)


def test_hf_qk_norm_keeps_fp32_and_normalised_q_and_k():
    """Qwen3's q_norm and k_norm (eager RMSNorms over each head) save 4 + 2 B per q and k
    element beyond the layer without them, split over tp with the heads; the norms' weights
    (head_dim each) are parameters."""
    qk = replace(LLAMA3_8B, qk_norm=True)
    plan, tokens = ParallelPlan(tp=2, micro_batch=2), 2 * 4096
    with_norm, live = stacks.hf_layer_bytes(qk, R, plan, 4096)
    without, live_without = stacks.hf_layer_bytes(LLAMA3_8B, R, plan, 4096)
    per_rank = tokens * (qk.q_dim + qk.kv_dim) // 2
    assert with_norm - without == pytest.approx(6 * per_rank, rel=1e-4)
    assert live - live_without == pytest.approx(6 * per_rank, rel=1e-4)
    assert qk.num_params() - LLAMA3_8B.num_params() == 2 * qk.head_dim * qk.num_layers
    # the reference trainer builds no q/k norm: its layer term is unchanged
    assert layer_bytes(qk, R, plan, 4096) == layer_bytes(LLAMA3_8B, R, plan, 4096)


def test_library_workspaces_are_allocated_tensors_of_the_stacks_not_twice_on_the_device():
    """cuBLAS's workspace (PyTorch, CublasHandlePool.cpp: 32 MiB on Hopper) and, for Megatron,
    Transformer Engine's (module/base.py get_workspace: 32 MiB on Hopper) are allocated through
    the caching allocator: in peak_allocated_bytes, and out of the device overhead that counts
    them for the reference trainer."""
    from frenzy_predictor.memory import device_overhead_bytes

    plan = ParallelPlan(dp=2, tp=2, micro_batch=1)
    expected = {"megatron": 64 * 2**20, "torchtitan": 32 * 2**20, "deepspeed": 32 * 2**20,
                "hf": 32 * 2**20}
    reference = estimate_memory(LLAMA3_8B, R, plan, 4096)
    assert "workspaces" not in reference.breakdown
    for framework, workspace in expected.items():
        est = estimate_memory(LLAMA3_8B, R, plan, 4096, framework=framework)
        assert est.breakdown["workspaces"] == workspace
        assert est.device_peak_bytes - est.peak_reserved_bytes == \
            device_overhead_bytes(plan) - workspace


def test_torchtitan_reserved_peak_keeps_fsdp2_side_stream_pools():
    """FSDP2 allocates the flat all-gather output on its copy-in stream and the reduce-scatter
    input and output shard on its reduce-scatter stream; the caching allocator reuses a block
    only on its own stream, so each pool stays reserved at its peak: for Llama-3-8B the root's
    (embedding + final norm + head, 1.05B parameters) bf16 all-gather output, and every fp32
    gradient shard (views of the reduce-scatter outputs, freed by the next zero_grad) plus the
    root's fp32 reduce-scatter input, beside the compute stream's peak at the loss."""
    from frenzy_predictor.memory import allocator_slack_bytes, fsdp_root_params, rank_layer_params

    plan = ParallelPlan(dp=8, zero=3, micro_batch=2, recompute="selective")
    est = estimate_memory(LLAMA3_8B, R, plan, 8192, grad_accum=1, framework="torchtitan")
    assert est.peak_phase == "backward" and est.breakdown["gradients"] == 0
    root = fsdp_root_params(LLAMA3_8B, plan, True, True)
    padded = -(-root // 8) * 8
    shards = (32 * rank_layer_params(LLAMA3_8B, plan) + root) // 8 * 4
    pools = padded * 2 + shards + padded * 4
    slack = allocator_slack_bytes(est.peak_allocated_bytes, stacks.EXPANDABLE_SEGMENTS_SLACK_FRACTION)
    assert est.peak_reserved_bytes - est.peak_allocated_bytes - slack == \
        pytest.approx(pools, abs=40 * 512)
    # the allocated peak is the compute stream's, unchanged; no pools without FSDP or replicas
    for other in (ParallelPlan(dp=8, zero=0, micro_batch=2), ParallelPlan(dp=1, zero=3, micro_batch=2)):
        e = estimate_memory(LLAMA3_8B, R, other, 8192, grad_accum=1, framework="torchtitan")
        assert e.peak_reserved_bytes == e.peak_allocated_bytes + allocator_slack_bytes(
            e.peak_allocated_bytes, stacks.EXPANDABLE_SEGMENTS_SLACK_FRACTION)
    # the reference trainer's reserved peak does not count them (not validated on reserved)
    ref = estimate_memory(LLAMA3_8B, R, plan, 8192, grad_accum=1)
    assert ref.peak_reserved_bytes == \
        ref.peak_allocated_bytes + allocator_slack_bytes(ref.peak_allocated_bytes)


def test_side_stream_pools_do_not_count_what_the_peak_phase_holds_in_them():
    from frenzy_predictor.memory import fsdp_block_reduce_scatter_input_bytes, fsdp_stream_pool_bytes

    plan = ParallelPlan(dp=8, zero=3, micro_batch=1)
    at_loss = fsdp_stream_pool_bytes(LLAMA3_8B, R, plan, "backward", 32)
    at_block = fsdp_stream_pool_bytes(LLAMA3_8B, R, plan, "layer_3_backward", 32)
    assert at_loss - at_block == fsdp_block_reduce_scatter_input_bytes(LLAMA3_8B, R, plan)
    assert fsdp_stream_pool_bytes(LLAMA3_8B, R, plan, "layer_backward", 32) == at_loss
    assert 0 < fsdp_stream_pool_bytes(LLAMA3_8B, R, plan, "root_reduce_scatter", 32) < at_block
    # gradient shards the phase holds (accumulation) are in the pool already
    assert at_loss - fsdp_stream_pool_bytes(LLAMA3_8B, R, plan, "backward", 32, 10**9) == 10**9


def test_megatron_fused_loss_keeps_one_more_fp32_logit_buffer():
    """--cross-entropy-loss-fusion compiles the in-place loss steps (jit_fuser = torch.compile):
    Inductor computes an in-place update of a graph input into a buffer of its own before the
    copy, so the loss holds 10 B per logit instead of 6."""
    plan = ParallelPlan(tp=2, micro_batch=4)
    logits = 4 * 1024 * (LLAMA3_8B.vocab_size // 2)
    plain = stacks.megatron_logits_loss_bytes(LLAMA3_8B, R, plan, 1024)
    fused = stacks.megatron_fused_logits_loss_bytes(LLAMA3_8B, R, plan, 1024)
    assert plain == pytest.approx(6 * logits, rel=1e-6)
    assert fused - plain == pytest.approx(4 * logits, rel=1e-6)
    est = estimate_memory(LLAMA3_8B, R, plan, 1024, framework="megatron")
    est_fused = estimate_memory(LLAMA3_8B, R, plan, 1024, framework="megatron", fused_loss=True)
    assert est_fused.breakdown["logits_loss"] - est.breakdown["logits_loss"] == fused - plain
    with pytest.raises(ValueError, match="fused_loss"):
        estimate_memory(LLAMA3_8B, R, plan, 1024, framework="torchtitan", fused_loss=True)


def test_megatron_cp_attention_keeps_the_ring_kv_chunk_and_a_second_output_copy():
    """TE's AttnFuncWithCPAndKVP2P saves the ring's last K/V chunk (a buffer of its own) and
    out_part, a 16-bit copy of the output beside the one it returns: per cp rank's tokens,
    2 x kv_dim + q_dim 16-bit values per token, saved without recompute."""
    rank_plan = ParallelPlan(tp=2, micro_batch=1)
    extra = stacks.megatron_context_parallel_attention_bytes(LLAMA3_8B, R, rank_plan, 4096)
    assert extra == pytest.approx(4096 * (2 * 1024 + 4096) * 2 / 2, rel=1e-6)
    for rc in ("none", "full"):
        cp = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=1, cp=2, tp=2, recompute=rc), 8192,
                             grad_accum=1, framework="megatron")
        as_dp = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=2, tp=2, recompute=rc), 4096,
                                grad_accum=1, framework="megatron")
        more = cp.peak_allocated_bytes - as_dp.peak_allocated_bytes
        # saved in all 32 layers without recompute; with full recompute only in the layer
        # running backward, which is the peak only when it exceeds the loss's
        assert more == 32 * extra if rc == "none" else more in (0, extra)
    # torchtitan's context parallelism is not Transformer Engine's: no such term
    tt = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=1, cp=2, zero=3), 8192, grad_accum=1,
                         framework="torchtitan")
    tt_dp = estimate_memory(LLAMA3_8B, R, ParallelPlan(dp=2, zero=3), 4096, grad_accum=1,
                            framework="torchtitan")
    assert tt.peak_allocated_bytes == tt_dp.peak_allocated_bytes


def test_zero3_saved_weight_views_hold_gathered_layers_until_their_backward():
    """Without DeepSpeed's memory-efficient linear, torch's linear saves a transposed view of each
    gathered weight: without recompute every layer's copy lives from its forward to its backward
    (at the loss all but the last layer's, which the gathering terms count; while block i runs
    backward, blocks 0..i); under full recompute only the recomputed layer's; one rank gathers
    nothing."""
    layer = 2 * LLAMA3_8B.layer_params()  # 16-bit, one layer
    plan = ParallelPlan(dp=8, zero=3, micro_batch=1, recompute="none")
    held = stacks.deepspeed_saved_weight_view_bytes
    assert held(LLAMA3_8B, R, plan, None) == pytest.approx(31 * layer, rel=1e-6)
    assert held(LLAMA3_8B, R, plan, 31) == pytest.approx(32 * layer, rel=1e-6)
    assert held(LLAMA3_8B, R, plan, 0) == pytest.approx(layer, rel=1e-6)
    full = replace(plan, recompute="full")
    assert held(LLAMA3_8B, R, full, None) == 0
    assert held(LLAMA3_8B, R, full, 31) == pytest.approx(layer, rel=1e-6)
    for other in (replace(plan, dp=1), replace(plan, zero=2)):
        assert held(LLAMA3_8B, R, other, None) == held(LLAMA3_8B, R, other, 31) == 0


@pytest.mark.parametrize("framework", ["deepspeed", "hf"])
def test_saved_weight_views_add_to_the_backward_peak_of_zero3_only(framework):
    recipe = Recipe(precision="fp16", grad_dtype="16bit")
    plan = ParallelPlan(dp=8, zero=3, micro_batch=1, recompute="none")
    base = estimate_memory(LLAMA3_8B, recipe, plan, 2048, grad_accum=1, framework=framework)
    views = estimate_memory(LLAMA3_8B, recipe, plan, 2048, grad_accum=1, framework=framework,
                            saved_weight_views=True)
    assert base.peak_phase == views.peak_phase == "backward"
    extra = views.peak_allocated_bytes - base.peak_allocated_bytes
    assert extra == views.breakdown["saved_weight_views"] == \
        stacks.deepspeed_saved_weight_view_bytes(LLAMA3_8B, recipe, plan, None)
    one_rank = replace(plan, dp=1)
    assert estimate_memory(LLAMA3_8B, recipe, one_rank, 2048, grad_accum=1, framework=framework,
                           saved_weight_views=True).peak_allocated_bytes == \
        estimate_memory(LLAMA3_8B, recipe, one_rank, 2048, grad_accum=1,
                        framework=framework).peak_allocated_bytes
    with pytest.raises(ValueError, match="saved_weight_views"):
        estimate_memory(LLAMA3_8B, recipe, plan, 2048, framework="megatron", saved_weight_views=True)


@pytest.mark.parametrize("name", ["llama3-8b", "gpt2", "mixtral-8x7b"])
def test_deepspeed_grad_numels_are_every_parameter_once(name):
    """The gradients ZeRO-3's reduce hook sees add up to the model, whatever the family."""
    arch = model_catalog()[name]
    numels = stacks.deepspeed_grad_numels(arch, ParallelPlan(dp=8, zero=3))
    assert sum(numels) == arch.num_params()
    assert numels[0] == arch.vocab_size * arch.hidden_size or arch.tied_embeddings  # head first


def test_deepspeed_reduce_scatter_copy_is_the_largest_padded_multi_gradient_bucket():
    """reduce_scatter_coalesced concatenates a bucket's padded rank chunks unless the bucket is
    one gradient dp divides. Llama-3-8B, 5e8-element buckets: the head (525M elements, divisible
    by 8) goes alone, uncopied; the next bucket holds the final norm, layers 31 and 30 and layer
    29's down projection (the up projection would pass 5e8)."""
    recipe = Recipe(precision="fp16", grad_dtype="16bit")
    plan = ParallelPlan(dp=8, zero=3)
    layer = LLAMA3_8B.layer_params()
    mlp_matrix = LLAMA3_8B.hidden_size * LLAMA3_8B.ffn_hidden_size
    first = LLAMA3_8B.hidden_size + 2 * layer + mlp_matrix
    in_backward, largest = stacks.deepspeed_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, plan)
    assert in_backward == largest == 2 * first
    # a bucket of one gradient dp divides is reduced in place; one rank still concatenates
    assert stacks.deepspeed_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, plan, 1) == (0, 0)
    one_rank = stacks.deepspeed_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, replace(plan, dp=1),
                                                          10**12)
    assert one_rank == (0, 2 * LLAMA3_8B.num_params())  # all in the end-of-backward bucket
    # the HF Trainer's "auto" bucket is hidden² elements
    assert stacks.hf_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, plan)[1] <= \
        2 * LLAMA3_8B.hidden_size ** 2


def test_deepspeed_stream_pools_keep_each_side_streams_high_water():
    """The all-gather stream's pool keeps the most weights gathered at once (none on one rank,
    which gathers nothing), the reduce stream's the largest bucket copy."""
    recipe = Recipe(precision="fp16", grad_dtype="16bit")
    plan = ParallelPlan(dp=8, zero=3)
    pools = stacks.deepspeed_stream_pool_bytes
    copy = stacks.deepspeed_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, plan)[1]
    assert pools(plan, 3 * 10**9, copy) == 3 * 10**9 + copy
    assert pools(replace(plan, dp=1), 3 * 10**9, copy) == copy
    assert pools(replace(plan, zero=2), 3 * 10**9, copy) == 0


@pytest.mark.parametrize("framework", ["deepspeed", "hf"])
def test_zero3_side_stream_terms_in_the_estimate(framework):
    """The bucket copy joins a layer's backward (a bucket fills every two layers or so), and the
    reserved peak adds the pools beyond the 5% slack; the allocated peak at the loss is
    unchanged, and no other stack gets either term."""
    recipe = Recipe(precision="fp16", grad_dtype="16bit")
    plan = ParallelPlan(dp=8, zero=3, micro_batch=1, recompute="full")
    est = estimate_memory(LLAMA3_8B, recipe, plan, 2048, grad_accum=1, framework=framework,
                          reduce_bucket_elements=500_000_000)
    copy = stacks.deepspeed_reduce_scatter_copy_bytes(LLAMA3_8B, recipe, plan)[0]
    assert est.peak_phase.startswith("layer_") and est.breakdown["reduce_scatter_copy"] == copy
    # at the loss (micro-batch 2) no copy is live: the reduce stream's pool keeps one reserved
    at_loss = estimate_memory(LLAMA3_8B, recipe, replace(plan, micro_batch=2), 2048, grad_accum=1,
                              framework=framework, reduce_bucket_elements=500_000_000)
    assert at_loss.peak_phase == "backward" and "reduce_scatter_copy" not in at_loss.breakdown
    # the compute stream's 5% slack plus both pools: the copy, and at least the weights gathered
    # at the loss (the same high water at the loss and in a layer's backward here)
    gathered = at_loss.breakdown["parameters"] - 2 * -(-LLAMA3_8B.num_params() // 8)
    compute = at_loss.peak_allocated_bytes - gathered
    # the reduce stream's pool: the larger of the bucket copy and the fp16 overflow check
    check = stacks.deepspeed_fp16_overflow_check_bytes(LLAMA3_8B, recipe, plan,
                                                       LLAMA3_8B.num_params())
    assert check > copy
    assert at_loss.peak_reserved_bytes == compute + int(compute * 0.05) + gathered + check
    for other in ("torchtitan", "frenzy"):
        e = estimate_memory(LLAMA3_8B, recipe, plan, 2048, grad_accum=1, framework=other)
        assert "reduce_scatter_copy" not in e.breakdown


@pytest.mark.parametrize("framework", ["deepspeed", "hf"])
@pytest.mark.parametrize("name", ["tinyllama-1.1b", "llama3-8b"])
def test_zero3_stream_pools_keep_memory_monotone_for_the_plan_search(framework, name):
    """The plan search prunes on memory never shrinking with the micro-batch nor growing with dp.
    A pool counted only beyond the peak phase broke that (tinyllama, ZeRO-3, dp 2: micro-batch
    1 peaks at the step, which holds no pool, and reserved more than micro-batch 2, whose
    layer phase holds them); each pool at its own high water keeps it."""
    arch, recipe = model_catalog()[name], Recipe(precision="fp16", grad_dtype="16bit",
                                                 framework=framework)
    for rc in ("none", "full"):
        def peak(dp: int, mb: int) -> int:
            return estimate_memory(arch, recipe, ParallelPlan(dp, 1, 1, 3, mb, rc), 512).peak_bytes
        for dp in (2, 4, 8):
            for mb in (1, 2, 4):
                assert peak(2 * dp, mb) <= peak(dp, mb) <= peak(dp, 2 * mb), (rc, dp, mb)


def test_deepspeed_fp16_overflow_check_is_a_16bit_copy_and_a_bool_per_partition_element():
    """stage3.py has_overflow: torch.isinf(grad_partitions_flat_buffer) is `abs() == inf`, a
    16-bit copy and a bool tensor of the rank's partition, live together: 3 B per element,
    rounded per allocation; fp16 only (bf16 skips the check), ZeRO-3 only, one rank too."""
    fp16 = Recipe(precision="fp16", grad_dtype="16bit")
    check = stacks.deepspeed_fp16_overflow_check_bytes
    n = LLAMA3_8B.num_params()
    shard = -(-n // 8)
    by_hand = -(-shard * 2 // 512) * 512 + -(-shard // 512) * 512
    assert check(LLAMA3_8B, fp16, ParallelPlan(dp=8, zero=3), n) == by_hand
    assert check(LLAMA3_8B, fp16, ParallelPlan(dp=1, zero=3), n) == pytest.approx(3 * n, rel=1e-6)
    assert check(LLAMA3_8B, Recipe(precision="bf16"), ParallelPlan(dp=8, zero=3), n) == 0
    assert check(LLAMA3_8B, fp16, ParallelPlan(dp=8, zero=2), n) == 0


@pytest.mark.parametrize("framework", ["deepspeed", "hf"])
def test_zero3_fp16_overflow_check_phase_and_reduce_stream_pool(framework):
    """The check runs before the step's fp32 gradient copy: its phase holds the states backward
    holds plus the check's temporaries, and the reduce stream keeps them reserved. Where the
    sub-group is small (sub_group_size), the check is the allocated peak itself."""
    fp16 = Recipe(precision="fp16", grad_dtype="16bit")
    plan = ParallelPlan(dp=1, zero=3, micro_batch=1, recompute="full")  # one rank: 3 B/param
    n = LLAMA3_8B.num_params()
    check = stacks.deepspeed_fp16_overflow_check_bytes(LLAMA3_8B, fp16, plan, n)
    tiny = estimate_memory(LLAMA3_8B, fp16, plan, 128, grad_accum=1, framework=framework,
                           sub_group_elements=10**6, reduce_bucket_elements=500_000_000)
    assert tiny.peak_phase == "overflow_check" and tiny.breakdown["overflow_check"] == check
    states = stacks.deepspeed_model_state_bytes(LLAMA3_8B, fp16, plan, n, False)
    assert tiny.peak_allocated_bytes == sum(states.values()) + check + 2 * 500_000_000 \
        + stacks.TORCH_CUBLAS_WORKSPACE_BYTES + 2 * 128 * 8  # inputs: ids and labels (int64)
    bf16 = estimate_memory(LLAMA3_8B, Recipe(precision="bf16", grad_dtype="16bit"), plan, 128,
                           grad_accum=1, framework=framework, sub_group_elements=10**6)
    assert "overflow_check" not in bf16.breakdown and bf16.peak_phase != "overflow_check"


def test_hf_sdpa_repeats_kv_to_every_query_head_for_grouped_query_attention():
    """transformers' SDPA path (4.40 LlamaSdpaAttention; current sdpa_attention_forward unless
    use_gqa_in_sdpa) repeats K and V to the 32 query heads of Llama-3-8B before SDPA saves them:
    2 x tokens x (4096 - 1024) 16-bit values more per layer than the reference's k and v, saved
    (not under full recompute) and live in the layer's backward; none without GQA, for eager
    (the reference already repeats) or with SDPA's enable_gqa."""
    plan = ParallelPlan(micro_batch=2)
    tokens = 2 * 2048
    by_hand = 2 * (tokens * 4096 * 2 - tokens * 1024 * 2)
    assert stacks.hf_sdpa_repeated_kv_bytes(LLAMA3_8B, R, plan, 2048) == by_hand
    assert stacks.hf_sdpa_repeated_kv_bytes(LLAMA3_8B, R, replace(plan, tp=2), 2048) == by_hand // 2
    assert stacks.hf_sdpa_repeated_kv_bytes(LLAMA3_8B, Recipe(attention="eager"), plan, 2048) == 0
    assert stacks.hf_sdpa_repeated_kv_bytes(GPT2, R, plan, 1024) == 0
    saved, live = stacks.hf_layer_bytes(LLAMA3_8B, R, plan, 2048)
    native = stacks.hf_layer_bytes(LLAMA3_8B, R, plan, 2048, sdpa_native_gqa=True)
    assert (saved - native[0], live - native[1]) == (by_hand, by_hand)
    full = replace(plan, recompute="full")
    f_saved, f_live = stacks.hf_layer_bytes(LLAMA3_8B, R, full, 2048)
    f_native = stacks.hf_layer_bytes(LLAMA3_8B, R, full, 2048, sdpa_native_gqa=True)
    assert (f_saved - f_native[0], f_live - f_native[1]) == (0, by_hand)


def test_sdpa_native_gqa_is_a_transformers_option():
    plan = ParallelPlan(dp=8, zero=3, micro_batch=1)
    fp16 = Recipe(precision="fp16", grad_dtype="16bit")
    repeated = estimate_memory(LLAMA3_8B, fp16, plan, 2048, grad_accum=1, framework="hf")
    native = estimate_memory(LLAMA3_8B, fp16, plan, 2048, grad_accum=1, framework="hf",
                             sdpa_native_gqa=True)
    # no recompute: every layer's repeated K and V are saved at the loss
    per_layer = stacks.hf_sdpa_repeated_kv_bytes(LLAMA3_8B, fp16, plan, 2048)
    assert repeated.breakdown["activations"] - native.breakdown["activations"] == 32 * per_layer
    with pytest.raises(ValueError, match="sdpa_native_gqa"):
        estimate_memory(LLAMA3_8B, fp16, plan, 2048, framework="torchtitan", sdpa_native_gqa=True)
