"""MARP's terms for the reference trainer's tensor- and pipeline-parallel plans (ParallelTrainer),
one test per term; the CPU profiler checks them end to end (tests/test_marp_accuracy.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from frenzy.catalog.models import model_catalog
from frenzy.domain import ParallelPlan, Recipe, TrainingSpec
from frenzy_predictor.memory import (_r, estimate_memory, layer_bytes, logits_loss_bytes,
                                     pipeline_buffer_bytes, reference_layer_bytes,
                                     reference_plan_as_run, replicated_logits_loss_bytes)
from frenzy_predictor.plans import MemoryTable, make_plan

LLAMA7B = model_catalog()["llama2-7b"]
TINYLLAMA = model_catalog()["tinyllama-1.1b"]
BF16 = Recipe()


def test_the_reference_head_replicates_the_logits_over_tp():
    """ColwiseParallel(output_layouts=Replicate()): every tp rank's loss sees the whole vocabulary."""
    plan = ParallelPlan(tp=4, micro_batch=2, sequence_parallel=True)
    whole = 3 * _r(4096 * 2 * LLAMA7B.vocab_size * 4)
    assert replicated_logits_loss_bytes(LLAMA7B, BF16, plan, 4096) == whole
    assert logits_loss_bytes(LLAMA7B, BF16, plan, 4096) == 3 * _r(4096 * 2 * 8000 * 4)  # torchtitan's


def test_a_pipelines_last_stage_also_caches_its_16_bit_logits():
    """PipelineStage.fwd_cache keeps the stage output (the logits) until the micro-batch's backward."""
    plan = ParallelPlan(pp=2, micro_batch=1)
    assert replicated_logits_loss_bytes(LLAMA7B, BF16, plan, 2048) == \
        replicated_logits_loss_bytes(LLAMA7B, BF16, replace(plan, pp=1), 2048) \
        + _r(2048 * LLAMA7B.vocab_size * 2)


def test_sequence_parallel_linears_save_the_gathered_norm_outputs():
    """DTensor's PrepareModuleInput all-gathers each norm's output before q/k/v and gate/up, which
    save the whole sequence; Megatron's layer keeps the 1/tp slice."""
    tokens_bytes = 4096 * LLAMA7B.hidden_size * 2
    sp = ParallelPlan(tp=4, sequence_parallel=True)
    ours, megatron = reference_layer_bytes(LLAMA7B, BF16, sp, 4096), layer_bytes(LLAMA7B, BF16, sp, 4096)
    assert ours[0] - megatron[0] == 2 * (_r(tokens_bytes) - _r(tokens_bytes // 4))
    plain = ParallelPlan(tp=4)
    assert reference_layer_bytes(LLAMA7B, BF16, plain, 4096) == layer_bytes(LLAMA7B, BF16, plain, 4096)
    full = replace(sp, recompute="full")  # only the block input is saved; the recomputed layer grows
    assert reference_layer_bytes(LLAMA7B, BF16, full, 4096)[0] == layer_bytes(LLAMA7B, BF16, full, 4096)[0]


@pytest.mark.parametrize("plan, as_run", [
    (ParallelPlan(dp=4, zero=1), ParallelPlan(dp=4, zero=1)),  # tp = pp = 1: the flat buffers
    (ParallelPlan(dp=4, tp=2, zero=0), ParallelPlan(dp=1, tp=2, zero=2)),  # HSDP, shard group 1
    (ParallelPlan(dp=4, tp=2, zero=1), ParallelPlan(dp=4, tp=2, zero=2)),  # ZeRO-1 runs as 2
    (ParallelPlan(dp=4, tp=2, zero=3), ParallelPlan(dp=4, tp=2, zero=3)),
    (ParallelPlan(dp=4, pp=2, zero=0), ParallelPlan(dp=4, pp=2, zero=0)),  # no-sync accumulation
    (ParallelPlan(dp=4, pp=2, zero=2), ParallelPlan(dp=4, pp=2, zero=1)),
])
def test_the_plan_as_the_parallel_trainer_runs_it(plan, as_run):
    assert reference_plan_as_run(plan) == as_run


def test_pipeline_buffers_per_stage():
    """Receive buffers for every micro-batch after stage 0, gradient receive buffers and cached
    outputs before the last stage, input gradients for the micro-batches done."""
    plan = ParallelPlan(pp=4, tp=2, micro_batch=2, sequence_parallel=True)
    one = _r(2 * 2048 // 2 * LLAMA7B.hidden_size * 2)

    def buffers(stage, in_flight, done):
        return pipeline_buffer_bytes(LLAMA7B, BF16, plan, 2048, stage, 8, in_flight, done)

    assert buffers(0, 4, 0) == (8 + 4) * one
    assert buffers(1, 3, 7) == (8 + 7 + 8 + 3) * one
    assert buffers(3, 1, 8) == (8 + 8) * one
    assert pipeline_buffer_bytes(LLAMA7B, BF16, replace(plan, pp=1), 2048, 0, 8, 1, 0) == 0


def test_stage_0_accumulates_the_whole_vocabularys_embedding_gradient_under_tp():
    """Between the first backward and the step's reduction, FSDP's no-sync accumulated fp32
    gradient of the vocabulary-parallel embedding covers all V rows (profiled), not V/tp."""
    plan = ParallelPlan(pp=2, tp=2, micro_batch=1, sequence_parallel=True)
    one = _r(2048 // 2 * LLAMA7B.hidden_size * 2)
    extra = _r(LLAMA7B.vocab_size * LLAMA7B.hidden_size * 4) \
        - _r(LLAMA7B.vocab_size // 2 * LLAMA7B.hidden_size * 4)

    def buffers(done, tp_plan=plan):
        return pipeline_buffer_bytes(LLAMA7B, BF16, tp_plan, 2048, 0, 4, 2, done)

    assert buffers(0) == (4 + 2) * one  # before any backward: no gradient yet
    assert buffers(3) == (4 + 2) * one + extra
    assert buffers(4) == (4 + 2) * one  # reduced and resharded at the step
    no_tp = replace(plan, tp=1, sequence_parallel=False)
    assert buffers(3, no_tp) == (4 + 2) * _r(2048 * LLAMA7B.hidden_size * 2)


def test_a_pipeline_holds_no_gradients_until_its_first_backward():
    """Stage 0's peak with as many micro-batches as stages: the first backward, with pp micro-batches
    in flight and no gradients (FSDP accumulates them unsharded from then on)."""
    plan = ParallelPlan(pp=2, micro_batch=1)
    first = estimate_memory(TINYLLAMA, BF16, plan, 4096, grad_accum=2, stage=0)
    assert first.breakdown["gradients"] == 0
    more = estimate_memory(TINYLLAMA, BF16, plan, 4096, grad_accum=3, stage=0)
    assert more.breakdown["gradients"] > 0
    assert more.breakdown["activations"] == first.breakdown["activations"]  # still 2 in flight


def test_other_stacks_keep_their_own_terms():
    """torch.distributed.pipelining's buffers apply to the stacks that pipeline with it: the
    reference trainer and torchtitan (stacks.torchtitan_plan_as_run), not Megatron, DeepSpeed or
    the HF Trainer."""
    plan = ParallelPlan(tp=2, pp=2, dp=2, zero=1, micro_batch=1, sequence_parallel=True)
    for framework in ("megatron", "deepspeed", "hf"):
        est = estimate_memory(LLAMA7B, replace(BF16, framework=framework), plan, 4096, grad_accum=8)
        assert "pipeline_buffers" not in est.breakdown
    for framework in ("frenzy", "torchtitan"):
        est = estimate_memory(LLAMA7B, replace(BF16, framework=framework), plan, 4096, grad_accum=8)
        assert est.breakdown.get("pipeline_buffers", 0) > 0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["tiny-llama", "llama3.2-1b", "llama2-7b"]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2]), st.sampled_from([1, 2, 4, 8]), st.integers(0, 3),
       st.sampled_from([1, 2]), st.sampled_from(["none", "full"]))
def test_the_searchs_state_floor_stays_below_the_estimate(name, tp, pp, dp, zero, mb, recompute):
    """The plan search skips layouts whose floor does not fit: it must never exceed the estimate,
    including for the plans the reference trainer runs with FSDP2 (its ZeRO stage as run)."""
    arch = model_catalog()[name]
    assume(arch.num_kv_heads % tp == 0)
    training = TrainingSpec(1024, 64, 10**9)
    table = MemoryTable(arch, training)
    plan = make_plan(tp, pp, dp, zero, mb, recompute)
    estimate = estimate_memory(arch, BF16, plan, 1024, grad_accum=plan.grad_accum(64))
    assert table.floor_bytes(tp, pp, dp, zero) <= estimate.peak_tensor_bytes
