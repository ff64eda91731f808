"""MARP on mixture-of-experts models (expert parallelism), context parallelism, and the Hugging
Face config.json families."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy.catalog.gpus import get_gpu
from frenzy.catalog.models import from_hf_config, model_catalog
from frenzy.domain import ParallelPlan, Recipe, TrainingSpec
from frenzy_predictor.memory import (estimate_memory, korthikanti_layer_activation_bytes,
                                     model_state_bytes, moe_dispatch_activation_bytes,
                                     rank_layer_params, stage_params)
from frenzy_predictor.plans import enumerate_options

MIXTRAL = model_catalog()["mixtral-8x7b"]
MISTRAL = model_catalog()["mistral-7b"]
R = Recipe()

MIXTRAL_JSON = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 8,
                "num_experts_per_tok": 2, "tie_word_embeddings": False}
QWEN_MOE_JSON = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24,
                 "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
                 "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                 "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936,
                 "max_position_embeddings": 8192, "decoder_sparse_step": 1, "mlp_only_layers": []}
GEMMA_JSON = {"model_type": "gemma", "hidden_size": 3072, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "intermediate_size": 24576, "vocab_size": 256000, "max_position_embeddings": 8192}
PHI3_JSON = {"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192,
             "vocab_size": 32064, "max_position_embeddings": 4096, "tie_word_embeddings": False}


def test_mixtral_has_its_published_46_7b_parameters_and_the_config_reads_the_same():
    assert MIXTRAL.num_params() == pytest.approx(46.7e9, rel=0.005)  # mistral.ai: 46.7B total
    assert from_hf_config(MIXTRAL_JSON).num_params() == MIXTRAL.num_params()
    assert MIXTRAL.active_ffn_size == 2 * 14336


def test_published_parameter_counts_of_other_families():
    assert from_hf_config(QWEN_MOE_JSON).num_params() == pytest.approx(14.3e9, rel=0.01)  # Qwen1.5-MoE-A2.7B
    gemma = from_hf_config(GEMMA_JSON)
    assert gemma.tied_embeddings and gemma.q_dim == 4096  # 16 heads x 256 != hidden 3072
    assert gemma.num_params() == pytest.approx(8.54e9, rel=0.01)  # gemma-7b
    assert from_hf_config(PHI3_JSON).num_params() == pytest.approx(3.82e9, rel=0.01)  # phi-3-mini


@pytest.mark.parametrize("config, field", [
    ({**MIXTRAL_JSON, "num_local_experts": None}, "num_local_experts"),
    ({k: v for k, v in QWEN_MOE_JSON.items() if k != "moe_intermediate_size"}, "moe_intermediate_size"),
    ({k: v for k, v in GEMMA_JSON.items() if k != "intermediate_size"}, "intermediate_size"),
    ({k: v for k, v in PHI3_JSON.items() if k != "num_hidden_layers"}, "num_hidden_layers"),
    ({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257},
     "n_positions"),
    ({**PHI3_JSON, "hidden_size": "big"}, "hidden_size"),
    ({**MIXTRAL_JSON, "num_experts_per_tok": 9}, "experts_per_token"),
])
def test_a_config_missing_or_spoiling_a_field_is_refused_naming_it(config, field):
    with pytest.raises(ValueError, match=field):
        from_hf_config(config)


def test_expert_parallelism_spreads_the_experts_but_not_the_rest():
    dense = MIXTRAL.layer_params() - MIXTRAL.expert_layer_params()
    assert rank_layer_params(MIXTRAL, ParallelPlan(dp=8, ep=8)) == \
        dense + MIXTRAL.expert_layer_params() // 8
    one, eight = (stage_params(MIXTRAL, ParallelPlan(dp=8, ep=ep), 0) for ep in (1, 8))
    assert eight < one / 4
    # ZeRO-1 shards the model's whole optimizer state over dp, however ep spreads the experts
    plan = ParallelPlan(dp=8, ep=8, zero=1)
    states = model_state_bytes(MIXTRAL, R, plan, eight, True)
    assert states["optimizer_states"] == pytest.approx(12 * MIXTRAL.num_params() / 8, rel=0.01)
    assert states["parameters"] == pytest.approx(2 * eight, rel=1e-4)


def test_moe_activations_grow_with_top_k_and_carry_router_and_dispatch_buffers():
    plan = ParallelPlan(micro_batch=1)
    moe = korthikanti_layer_activation_bytes(MIXTRAL, R, plan, 4096)
    dense = korthikanti_layer_activation_bytes(MISTRAL, R, plan, 4096)  # same dims, one MLP
    extra = sum(moe_dispatch_activation_bytes(MIXTRAL, R, 4096))
    assert extra == 4096 * (2 * 8 * 4 + 2 * 2 * 4096 * 2)
    assert moe == pytest.approx(dense + 4 * 4096 * 14336 * 2 + extra, rel=1e-3)  # +1 expert's SwiGLU
    assert moe_dispatch_activation_bytes(MISTRAL, R, 4096) == []


def test_ep_must_divide_experts_and_dp_and_needs_a_moe_model():
    with pytest.raises(ValueError, match="plan.ep"):
        estimate_memory(MISTRAL, R, ParallelPlan(dp=2, ep=2), 512)
    with pytest.raises(ValueError, match="plan.ep"):
        estimate_memory(MIXTRAL, R, ParallelPlan(dp=6, ep=3), 512)
    with pytest.raises(ValueError, match="plan.ep"):
        ParallelPlan(dp=4, ep=8).validate()


def test_the_search_spreads_experts_and_fits_mixtral_where_replicas_would_not():
    training = TrainingSpec(4096, 64, 64 * 4096 * 10, R)
    gpu = get_gpu("H100-80GB")
    options = enumerate_options(MIXTRAL, training, [gpu], ep=8)
    assert options and all(o.plan.ep == 8 and o.plan.dp % 8 == 0 for o in options)
    for o in options:
        est = estimate_memory(MIXTRAL, R, o.plan, 4096, grad_accum=o.plan.grad_accum(64))
        assert o.peak_bytes_per_gpu == est.device_peak_bytes <= 0.95 * gpu.memory_bytes


@settings(max_examples=30, deadline=None)
@given(cp=st.sampled_from([2, 4, 8]), seq_pow=st.integers(12, 15), zero=st.integers(0, 3),
       rc=st.sampled_from(["none", "full"]))
def test_context_parallelism_is_dp_times_cp_ranks_on_seq_over_cp(cp, seq_pow, zero, rc):
    """A cp group holds seq/cp tokens per rank and shards states over dp x cp: the same memory
    as that many data-parallel ranks on sequences cp times shorter — and less than no cp."""
    seq = 2 ** seq_pow
    with_cp = estimate_memory(MISTRAL, R, ParallelPlan(dp=2, cp=cp, zero=zero, recompute=rc), seq,
                              grad_accum=2)
    as_dp = estimate_memory(MISTRAL, R, ParallelPlan(dp=2 * cp, zero=zero, recompute=rc),
                            seq // cp, grad_accum=2)
    assert with_cp.peak_allocated_bytes == as_dp.peak_allocated_bytes
    without = estimate_memory(MISTRAL, R, ParallelPlan(dp=2, zero=zero, recompute=rc), seq,
                              grad_accum=2)
    assert with_cp.peak_allocated_bytes < without.peak_allocated_bytes
    assert ParallelPlan(dp=2, cp=cp).num_gpus == 2 * cp


def test_cp_must_divide_the_sequence():
    with pytest.raises(ValueError, match="plan.cp"):
        estimate_memory(MISTRAL, R, ParallelPlan(cp=3), 4096)


# --- context and expert parallelism in the cost model and the plan search ---------------------

from dataclasses import replace  # noqa: E402

from frenzy_predictor.cost import (BANDWIDTH_EFFICIENCY, COLLECTIVE_LATENCY_S, COMM_OVERLAP,  # noqa: E402
                                   GB, CostModel)
from frenzy_predictor.plans import context_parallel_sizes  # noqa: E402

H100 = get_gpu("H100-80GB")
LLAMA3_8B = model_catalog()["llama3-8b"]


def _long_job(framework: str, seq_len: int = 65536) -> TrainingSpec:
    return TrainingSpec(seq_len, 64, 64 * seq_len * 10, Recipe(framework=framework))


def test_cp_ring_moves_kv_chunks_cp_minus_one_hops_three_passes_mostly_hidden():
    """Llama-3-8B, 32k tokens, cp 2 on one node: each layer passes its 16k-token K and V chunk
    (2 x 16384 x 1024 bf16 values) one hop, in forward and twice in backward; the attention of
    a 16k x 32k chunk is far longer, so only (1 - COMM_OVERLAP) of the ring is exposed; every
    one of the step's 64 / 4 = 16 micro-batches pays it."""
    training = _long_job("megatron", 32768)
    cost = CostModel(LLAMA3_8B, training, H100)
    chunk_bytes = 2 * 16384 * 1024 * 2
    hop_s = chunk_bytes / (H100.intra_node_gbs * GB * BANDWIDTH_EFFICIENCY) + COLLECTIVE_LATENCY_S
    expected = 16 * 32 * (1 - COMM_OVERLAP) * 3 * hop_s
    t = cost.breakdown_of(1, 1, 4, 1, 1, "none", 2)
    assert t.context_parallel_s == pytest.approx(expected, rel=1e-9)
    full = cost.breakdown_of(1, 1, 4, 1, 1, "full", 2)  # the recomputed forward passes it again
    assert full.context_parallel_s == pytest.approx(expected * 4 / 3, rel=1e-9)
    assert cost.breakdown_of(1, 1, 4, 1, 1, "none").context_parallel_s == 0.0


@settings(max_examples=20, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), seq_pow=st.integers(14, 17), rc=st.sampled_from(["none", "full"]))
def test_cp_ring_grows_with_cp_and_kv_heads_and_splits_the_compute(tp, seq_pow, rc):
    seq = 2 ** seq_pow
    training = _long_job("megatron", seq)
    cost = CostModel(LLAMA3_8B, training, H100)
    mha = CostModel(replace(LLAMA3_8B, num_kv_heads=LLAMA3_8B.num_heads), training, H100)
    rings = [cost.breakdown_of(tp, 1, 2, 1, 1, rc, cp).context_parallel_s for cp in (2, 4, 8)]
    assert 0 < rings[0] <= rings[1] <= rings[2]
    # GQA: 8 kv heads pass a quarter of MHA's K/V
    assert cost.breakdown_of(tp, 1, 2, 1, 1, rc, 2).context_parallel_s < \
        mha.breakdown_of(tp, 1, 2, 1, 1, rc, 2).context_parallel_s
    # a cp rank computes a 1/cp share of the micro-batch's tokens
    one, two = cost.breakdown_of(tp, 1, 2, 1, 1, rc), cost.breakdown_of(tp, 1, 2, 1, 1, rc, 2)
    assert two.compute_s < one.compute_s


def test_ep_all_to_alls_dispatch_and_combine_per_moe_layer():
    """Mixtral, 4096 tokens, top-2, ep 8 on one node: 4 all-to-alls per layer (dispatch and
    combine, forward and backward; 6 under full recompute), each moving 7/8 of the
    4096 x 2 x 4096 bf16 routed values a rank holds over NVLink), in each of the step's
    64 / 8 = 8 micro-batches."""
    training = TrainingSpec(4096, 64, 64 * 4096 * 10, R)
    cost = CostModel(MIXTRAL, training, H100, ep=8)
    routed_bytes = 4096 * 2 * 4096 * 2
    one = 7 / 8 * routed_bytes / (H100.intra_node_gbs * GB * BANDWIDTH_EFFICIENCY) \
        + COLLECTIVE_LATENCY_S * 2 * 3
    t = cost.breakdown_of(1, 1, 8, 1, 1, "none")
    assert t.expert_parallel_s == pytest.approx(8 * 32 * 4 * one, rel=1e-9)
    assert cost.breakdown_of(1, 1, 8, 1, 1, "full").expert_parallel_s == \
        pytest.approx(8 * 32 * 6 * one, rel=1e-9)
    # no ep, or a dense model: no all-to-all
    assert CostModel(MIXTRAL, training, H100).breakdown_of(1, 1, 8, 1, 1, "none").expert_parallel_s == 0
    assert CostModel(MISTRAL, training, H100, ep=8).breakdown_of(1, 1, 8, 1, 1, "none").expert_parallel_s == 0
    # an ep group wider than a node crosses the network: slower per byte
    wide = CostModel(MIXTRAL, training, H100, ep=16).breakdown_of(1, 1, 16, 1, 1, "none")
    assert wide.expert_parallel_s > t.expert_parallel_s


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]), dp_pow=st.integers(0, 4),
       cp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3), ep=st.sampled_from([1, 2, 8]),
       rc=st.sampled_from(["none", "selective", "full"]))
def test_memoised_step_time_is_the_breakdown_total_with_cp_and_ep(tp, pp, dp_pow, cp, zero, ep, rc):
    dp = max(ep, 2 ** dp_pow)
    cost = CostModel(MIXTRAL, TrainingSpec(16384, 256, 256 * 16384 * 10, R), H100, ep=ep)
    assert cost.step_s(tp, pp, dp, zero, 1, rc, cp) == cost.breakdown_of(tp, pp, dp, zero, 1, rc, cp).total_s


def test_cp_sizes_only_for_long_sequences_on_stacks_with_context_parallelism():
    assert context_parallel_sizes("megatron", 4096, 512) == [1]
    assert context_parallel_sizes("frenzy", 131072, 512) == [1]  # the reference trainer has none
    assert context_parallel_sizes("hf", 131072, 512) == [1]
    assert context_parallel_sizes("megatron", 8192, 512) == [1, 2, 4]  # >= 2048 tokens per rank
    assert context_parallel_sizes("torchtitan", 65536, 8) == [1, 2, 4, 8]  # at most the GPUs
    assert context_parallel_sizes("megatron", 40968, 512) == [1, 2, 4]  # 2 x cp equal chunks


def test_the_search_offers_cp_for_long_sequences_and_prices_each_option_as_estimated():
    for framework in ("megatron", "torchtitan"):
        training = _long_job(framework)
        options = enumerate_options(LLAMA3_8B, training, [H100])
        assert any(o.plan.cp > 1 for o in options), framework
        for o in options:
            assert training.seq_len % (2 * o.plan.cp) == 0
            assert o.num_gpus == o.plan.dp * o.plan.tp * o.plan.pp * o.plan.cp
            est = estimate_memory(LLAMA3_8B, training.recipe, o.plan, training.seq_len,
                                  grad_accum=o.plan.grad_accum(training.global_batch_size))
            assert o.peak_bytes_per_gpu == est.device_peak_bytes <= 0.95 * H100.memory_bytes
            assert o.step_time_s == CostModel(LLAMA3_8B, training, H100).breakdown(o.plan).total_s
    # 32k tokens: long enough for the stacks' cp; at 64k nothing the reference trainer runs fits
    # an H100 (every tp rank holds the whole vocabulary's logits), so it would prove nothing
    frenzy = enumerate_options(LLAMA3_8B, _long_job("frenzy", 32768), [H100])
    assert frenzy and all(o.plan.cp == 1 for o in frenzy)
    short = enumerate_options(LLAMA3_8B, _long_job("megatron", 4096), [H100])
    assert short and all(o.plan.cp == 1 for o in short)
