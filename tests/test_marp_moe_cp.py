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
