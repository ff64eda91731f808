"""Unit and property tests of MARP's analytical memory model (no torch needed)."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy.catalog.models import model_catalog
from frenzy.domain import ParallelPlan, Recipe
from frenzy_predictor.memory import MemoryEstimate, estimate_memory

CATALOG = model_catalog()
LLAMA7B = CATALOG["llama2-7b"]
GPT2 = CATALOG["gpt2"]


def peak(arch=LLAMA7B, recipe=Recipe(), seq_len=2048, **plan) -> int:
    return estimate_memory(arch, recipe, ParallelPlan(**plan), seq_len).peak_tensor_bytes


def test_breakdown_sums_to_peak_and_overhead_is_separate():
    est = estimate_memory(LLAMA7B, Recipe(), ParallelPlan(dp=2, micro_batch=2), 4096)
    assert isinstance(est, MemoryEstimate)
    tensors = {k: v for k, v in est.breakdown.items() if k != "framework_overhead"}
    assert sum(tensors.values()) == est.peak_tensor_bytes
    assert est.peak_bytes == est.peak_tensor_bytes + est.breakdown["framework_overhead"]
    assert est.breakdown["framework_overhead"] > 0


def test_model_states_are_18_bytes_per_param_without_sharding():
    est = estimate_memory(LLAMA7B, Recipe(), ParallelPlan(), 512)
    states = est.breakdown["parameters"] + est.breakdown["gradients"] + est.breakdown["optimizer_states"]
    assert states == pytest.approx(18 * LLAMA7B.num_params(), rel=1e-4)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["gpt2", "gpt2-medium", "tinyllama-1.1b", "llama2-7b", "mistral-7b"]),
       seq_len=st.sampled_from([128, 256, 512]), mb=st.integers(1, 8),
       zero=st.integers(0, 3), dp=st.sampled_from([1, 2, 8]),
       recompute=st.sampled_from(["none", "selective", "full"]),
       attention=st.sampled_from(["eager", "flash"]))
def test_monotonic_in_seq_len_and_micro_batch(name, seq_len, mb, zero, dp, recompute, attention):
    arch, recipe = CATALOG[name], Recipe(attention=attention)
    base = peak(arch, recipe, seq_len, micro_batch=mb, zero=zero, dp=dp, recompute=recompute)
    assert peak(arch, recipe, seq_len * 2, micro_batch=mb, zero=zero, dp=dp, recompute=recompute) > base
    assert peak(arch, recipe, seq_len, micro_batch=mb + 1, zero=zero, dp=dp, recompute=recompute) > base


@settings(max_examples=40, deadline=None)
@given(zero=st.integers(1, 3), dp=st.sampled_from([2, 4, 8, 64]), seq_len=st.sampled_from([512, 4096]))
def test_sharding_reduces_per_rank_bytes(zero, dp, seq_len):
    assert peak(seq_len=seq_len, zero=zero, dp=dp) < peak(seq_len=seq_len, zero=zero - 1, dp=dp)
    assert peak(seq_len=seq_len, zero=zero, dp=dp) < peak(seq_len=seq_len, zero=zero, dp=1)


def test_recompute_and_tensor_parallel_reduce_memory():
    assert peak(seq_len=4096, recompute="full") < peak(seq_len=4096, recompute="selective") \
        <= peak(seq_len=4096)
    assert peak(tp=2) < peak(tp=1)
    assert peak(tp=4, sequence_parallel=True) < peak(tp=4)


def test_pipeline_first_stage_holds_p_micro_batches():
    est = estimate_memory(LLAMA7B, Recipe(), ParallelPlan(pp=4), 4096, grad_accum=8)
    assert est.peak_stage in (0, 3)
    assert peak(pp=4) < peak(pp=1)


def test_eager_attention_costs_more_than_flash_at_long_sequences():
    assert peak(seq_len=8192, recipe=Recipe(attention="eager")) > peak(seq_len=8192)


@pytest.mark.parametrize("plan, seq_len, field", [
    (ParallelPlan(tp=3), 512, "num_heads"),
    (ParallelPlan(tp=64), 512, "num_heads"),
    (ParallelPlan(pp=64), 512, "num_layers"),  # more stages than layers (pp 3: uneven, runs)
    (ParallelPlan(dp=0), 512, "plan.dp"),
    (ParallelPlan(micro_batch=0), 512, "plan.micro_batch"),
    (ParallelPlan(zero=4), 512, "plan.zero"),
    (ParallelPlan(recompute="some"), 512, "plan.recompute"),
    (ParallelPlan(), 0, "seq_len"),
    (ParallelPlan(), 2_000_000, "seq_len"),
])
def test_bad_input_names_the_field(plan, seq_len, field):
    with pytest.raises(ValueError, match=field):
        estimate_memory(LLAMA7B, Recipe(), plan, seq_len)


def test_kv_heads_must_divide_tp():
    with pytest.raises(ValueError, match="num_kv_heads"):
        estimate_memory(CATALOG["mistral-7b"], Recipe(), ParallelPlan(tp=16), 512)


def test_gpt2_learned_positions_bound_seq_len():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        estimate_memory(GPT2, Recipe(), ParallelPlan(), 2048)


def test_bad_recipe_names_the_field():
    with pytest.raises(ValueError, match="training.precision"):
        estimate_memory(GPT2, Recipe(precision="fp8"), ParallelPlan(), 512)


def test_plan_search_memo_computes_each_term_once():
    """The plan search's speed comes from its memo (the per-call figure is in
    bench/marp_speed.py): a repeated plan computes no term again, and a plan that differs only
    in dp recomputes only the terms that read dp, not the layer and loss terms."""
    memo: dict = {}
    plan = ParallelPlan(dp=8, tp=2, pp=2, zero=1, micro_batch=2, recompute="full")
    first = estimate_memory(LLAMA7B, Recipe(), plan, 4096, memo=memo)
    terms_first = len(memo)
    assert estimate_memory(LLAMA7B, Recipe(), plan, 4096, memo=memo) == first
    assert len(memo) == terms_first
    layer_terms = {k for k in memo if k[0] in ("stage", "layer")}
    assert layer_terms
    other_dp = ParallelPlan(dp=4, tp=2, pp=2, zero=1, micro_batch=2, recompute="full")
    estimate_memory(LLAMA7B, Recipe(), other_dp, 4096, memo=memo)
    assert 0 < len(memo) - terms_first < terms_first - 1
    assert {k for k in memo if k[0] in ("stage", "layer")} == layer_terms


_MEMOS: dict = {}  # one memo per job, kept across examples so that later plans hit it


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["tiny-gpt2", "gpt2", "tinyllama-1.1b", "llama3.2-1b", "mistral-7b"]),
       recipe=st.sampled_from([Recipe(), Recipe(attention="eager", dropout=0.1),
                               Recipe(precision="fp32", optimizer="sgd"), Recipe(grad_dtype="16bit")]),
       seq_len=st.sampled_from([128, 1024]), dp=st.sampled_from([1, 2, 8]),
       tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), zero=st.integers(0, 3),
       mb=st.sampled_from([1, 2, 4]), recompute=st.sampled_from(["none", "selective", "full"]),
       sp=st.booleans(), grad_accum=st.sampled_from([None, 1, 2, 8]))
def test_memo_changes_nothing(name, recipe, seq_len, dp, tp, pp, zero, mb, recompute, sp,
                              grad_accum):
    arch = CATALOG[name]
    seq_len = min(seq_len, arch.max_position_embeddings)  # gpt2 has learned positions
    plan = ParallelPlan(dp, tp, pp, zero, mb, recompute, sp)
    memo = _MEMOS.setdefault((name, recipe, seq_len), {})
    fresh = estimate_memory(arch, recipe, plan, seq_len, grad_accum=grad_accum)
    memoised = estimate_memory(arch, recipe, plan, seq_len, grad_accum=grad_accum, memo=memo)
    assert memoised == fresh and list(memoised.breakdown) == list(fresh.breakdown)


def test_memo_is_for_one_job():
    memo: dict = {}
    estimate_memory(GPT2, Recipe(), ParallelPlan(), 512, memo=memo)
    with pytest.raises(ValueError, match="memo"):
        estimate_memory(GPT2, Recipe(), ParallelPlan(), 1024, memo=memo)


def test_memo_validates_the_job_once_and_every_plan():
    memo: dict = {}
    with pytest.raises(ValueError, match="seq_len"):
        estimate_memory(GPT2, Recipe(), ParallelPlan(), 2048, memo=memo)
    assert "job" not in memo  # a job that failed is not remembered as valid
    estimate_memory(GPT2, Recipe(), ParallelPlan(), 512, memo=memo)
    with pytest.raises(ValueError, match="num_heads"):
        estimate_memory(GPT2, Recipe(), ParallelPlan(tp=5), 512, memo=memo)


@pytest.mark.parametrize("name, recipe, seq_len", [
    ("llama3.2-1b", Recipe(), 128),  # large tied vocabulary, short: FSDP end of backward
    ("mistral-7b", Recipe(grad_dtype="16bit"), 64),  # untied: the root reduce-scatter
    ("tiny-gpt2", Recipe(attention="eager", dropout=0.1), 256),  # layer backward
    ("gpt2", Recipe(precision="fp32", optimizer="sgd"), 1024),
    ("tinyllama-1.1b", Recipe(), 4096),  # long: activations
])
def test_memo_changes_nothing_on_a_grid(name, recipe, seq_len):
    """Every plan of a grid against one memo: a term memoised on too few plan fields would
    hand one plan another's value (the winning phase or its breakdown would differ)."""
    arch, memo = CATALOG[name], {}
    for tp, pp, dp, zero, mb, recompute, grad_accum in itertools.product(
            (1, 2, 4), (1, 2), (1, 2, 3, 8), (0, 1, 2, 3), (1, 4), ("none", "selective", "full"),
            (None, 1, 4)):
        plan = ParallelPlan(dp, tp, pp, zero, mb, recompute, tp > 1)
        fresh = estimate_memory(arch, recipe, plan, seq_len, grad_accum=grad_accum)
        assert estimate_memory(arch, recipe, plan, seq_len, grad_accum=grad_accum,
                               memo=memo) == fresh, (plan, grad_accum, fresh.peak_phase)


def test_three_peaks_are_ordered_and_the_old_names_are_aliases():
    """allocated <= reserved <= device; peak_tensor_bytes and peak_bytes keep their meaning."""
    for plan in (ParallelPlan(), ParallelPlan(dp=8, zero=3, micro_batch=2)):
        est = estimate_memory(LLAMA7B, Recipe(), plan, 4096)
        assert est.peak_allocated_bytes < est.peak_reserved_bytes < est.device_peak_bytes
        assert est.peak_tensor_bytes == est.peak_allocated_bytes
        assert est.peak_bytes == est.device_peak_bytes
        assert est.framework == "frenzy"
    one, many = (estimate_memory(LLAMA7B, Recipe(), ParallelPlan(dp=dp), 512) for dp in (1, 2))
    # NCCL buffers only with more than one GPU; the allocator's slack scales with the tensors
    assert many.device_peak_bytes - many.peak_reserved_bytes > \
        one.device_peak_bytes - one.peak_reserved_bytes


def test_unknown_framework_is_refused_with_the_field_named():
    with pytest.raises(ValueError, match="training.framework"):
        estimate_memory(LLAMA7B, Recipe(), ParallelPlan(), 512, framework="jax")
