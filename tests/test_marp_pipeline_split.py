"""Uneven pipeline stages: each stack's own split rule (frenzy_predictor.pipeline_split) and the
per-stage peak MARP takes over them (memory.estimate_memory). Hand-worked cases from the stacks'
code; the even split keeps today's bytes exactly."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy.catalog.models import model_catalog
from frenzy.domain import ParallelPlan, Recipe
from frenzy.runnable import runnable_plan
from frenzy_predictor.memory import (chunk_in_flight, estimate_memory, peak_stage_candidates,
                                     stage_params)
from frenzy_predictor.pipeline_split import (PipelineSplit, even_split, megatron_split,
                                             reference_split, torchtitan_split)
from frenzy_predictor.plans import model_parallel_shapes

ROOT = Path(__file__).resolve().parent.parent
CATALOG = model_catalog()
LLAMA405B = CATALOG["llama3.1-405b"]
GPT2 = CATALOG["gpt2"]
R = Recipe()


def test_torchtitan_splits_126_layers_over_8_stages_as_generate_split_points_does():
    """9dec370 generate_split_points: base 15, extra 6; stage 0 takes 15, the six middle stages
    16 each (the extras), the last what is left, 15."""
    assert torchtitan_split(126, 8).stage_layers == (15, 16, 16, 16, 16, 16, 16, 15)
    assert torchtitan_split(126, 16).stage_layers == (7,) + (8,) * 14 + (7,)
    # interleaved: 16 virtual stages (7, 8 x 14, 7), virtual stage s on rank s % 8 ("loop")
    assert torchtitan_split(126, 8, 2).chunk_layers[0] == (7, 8)
    assert torchtitan_split(126, 8, 2).chunk_layers[7] == (8, 7)
    # extra = stages - 1: the last stage takes base + 1 as well
    assert torchtitan_split(15, 8).stage_layers == (1, 2, 2, 2, 2, 2, 2, 2)
    assert torchtitan_split(32, 4).stage_layers == (8, 8, 8, 8)
    with pytest.raises(ValueError, match="plan.pp"):
        torchtitan_split(6, 8)


def test_megatron_account_for_embedding_and_loss_6_layers_over_4_stages():
    """get_num_layers_to_build: (6 + 1 + 1) / 4 = 2 per rank; the first rank's first virtual
    stage and the last rank's last build one fewer."""
    assert megatron_split(6, 4, account_for_embedding=True,
                          account_for_loss=True).stage_layers == (1, 2, 2, 1)
    assert megatron_split(6, 4, 2, account_for_embedding=True,
                          account_for_loss=True).chunk_layers == ((0, 1), (1, 1), (1, 1), (1, 0))
    assert megatron_split(7, 4, account_for_embedding=True).stage_layers == (1, 2, 2, 2)
    with pytest.raises(ValueError, match="plan.pp"):
        megatron_split(6, 4, account_for_embedding=True)  # 7 layers over 4


def test_megatron_first_and_last_stage_layers_and_what_it_refuses():
    assert megatron_split(12, 4, first_stage_layers=2, last_stage_layers=2).stage_layers == \
        (2, 4, 4, 2)
    assert megatron_split(126, 8, first_stage_layers=15, last_stage_layers=15).stage_layers == \
        (15, 16, 16, 16, 16, 16, 16, 15)
    assert megatron_split(32, 4).stage_layers == (8, 8, 8, 8)
    with pytest.raises(ValueError, match="plan.pp 8 must divide model.num_layers 126"):
        megatron_split(126, 8)  # Megatron's default split needs a divisor
    with pytest.raises(ValueError, match="left"):
        megatron_split(12, 4, first_stage_layers=3, last_stage_layers=2)  # 7 over 2 stages
    with pytest.raises(ValueError, match="refuses"):
        megatron_split(12, 4, first_stage_layers=2, account_for_loss=True)
    with pytest.raises(ValueError, match="virtual_stages"):
        megatron_split(12, 4, 2, first_stage_layers=3, last_stage_layers=3)


def test_reference_split_is_the_trainers_own():
    """The reference trainer's pipeline_stage keeps parallelize.stage_layers' layers."""
    parallelize = pytest.importorskip("frenzy_trainer.parallelize")
    for layers, pp in ((126, 8), (12, 5), (32, 4), (3, 3)):
        assert reference_split(layers, pp).stage_layers == tuple(
            len(parallelize.stage_layers(layers, s, pp)) for s in range(pp))


def test_stacks_without_an_uneven_rule_refuse_it_naming_the_field():
    plan = ParallelPlan(pp=8, micro_batch=1)
    for framework in ("deepspeed", "hf", "megatron"):
        with pytest.raises(ValueError, match="plan.pp 8 must divide model.num_layers 126"):
            estimate_memory(LLAMA405B, R, plan, 4096, framework=framework)
    with pytest.raises(ValueError, match="plan.pp"):
        estimate_memory(replace(GPT2, num_layers=4), R, plan, 1024)  # 8 stages, 4 layers
    with pytest.raises(ValueError, match="pipeline_split"):
        estimate_memory(LLAMA405B, R, plan, 4096, framework="megatron",
                        pipeline_split=PipelineSplit(((16,),) * 8))  # 128 layers, not 126


def test_uneven_stage_holds_its_own_layers_parameters():
    """Stage 1 of torchtitan's 126 / 8 holds 16 layers, stage 0 15 and the embedding."""
    plan = ParallelPlan(dp=8, tp=8, pp=8, zero=1, micro_batch=1, recompute="full",
                        sequence_parallel=True)
    layer = LLAMA405B.layer_params() // 8
    assert stage_params(LLAMA405B, plan, 1, 16) == 16 * layer
    assert stage_params(LLAMA405B, plan, 0, 15) == -(-(15 * LLAMA405B.layer_params()
                                                        + LLAMA405B.embedding_params()) // 8)
    one = estimate_memory(LLAMA405B, R, plan, 8192, framework="torchtitan", stage=1,
                          grad_accum=32)
    sixteen = estimate_memory(replace(LLAMA405B, num_layers=128), R, plan, 8192,
                              framework="torchtitan", stage=1, grad_accum=32)
    assert one.stage_layers == (15, 16, 16, 16, 16, 16, 16, 15)
    assert one.breakdown == sixteen.breakdown  # stage 1 is any 16-layer middle stage
    whole = estimate_memory(LLAMA405B, R, plan, 8192, framework="torchtitan", grad_accum=32)
    assert whole.peak_allocated_bytes == max(
        estimate_memory(LLAMA405B, R, plan, 8192, framework="torchtitan", grad_accum=32,
                        stage=s).peak_allocated_bytes for s in range(8))


def test_peak_stage_candidates_add_heavier_middle_stages_only():
    assert peak_stage_candidates(even_split(32, 4)) == [0, 3]
    assert peak_stage_candidates(torchtitan_split(126, 8)) == [0, 1, 7]
    assert peak_stage_candidates(megatron_split(6, 4, account_for_embedding=True,
                                                account_for_loss=True)) == [0, 1, 3]
    assert peak_stage_candidates(even_split(12, 1)) == [0]


def test_interleaved_chunks_of_different_sizes_count_each_chunk_in_flight():
    """Last rank of Megatron's account-for-embedding/loss split, pp 4, v 2, g 4: warm-up (2 - 1)
    x 4 chunk forwards + 1 = 5, in get_model_chunk_id order: four of chunk 0 (1 layer), one of
    chunk 1 (no layer, the output layer and loss)."""
    split = megatron_split(6, 4, 2, account_for_embedding=True, account_for_loss=True)
    plan = ParallelPlan(dp=2, pp=4, micro_batch=4)
    assert chunk_in_flight(split, plan, 3, 5 / 2, 2) == (4, 1)
    # first rank: (4 - 0 - 1) x 2 + 4 + 1 = 11 forwards, chunks 0,0,0,0,1,1,1,1,0,0,0: seven of
    # chunk 0 (no layer, the embedding), four of chunk 1 (1 layer)
    assert chunk_in_flight(split, plan, 0, 11 / 2, 2) == (4, 7)


def test_even_split_gives_todays_bytes():
    """A published Megatron pp-4 row, as bench/marp_published.py printed it before uneven
    splits (3_913_177_088 B: megatron/gpt3_mcore_te_tp1_pp4_vp1_dist_optimizer_*); and an
    explicit even split is the default one."""
    sys.path.insert(0, str(ROOT / "bench"))
    import yaml
    from marp_published import DATA, predict

    rows = {r["id"]: r for r in yaml.safe_load(DATA.read_text())}
    row = rows["megatron/gpt3_mcore_te_tp1_pp4_vp1_dist_optimizer_overlap_grad_reduce/dev_dgx_a100"]
    assert predict(row)["ours"] == 3_913_177_088
    plan = ParallelPlan(dp=2, tp=2, pp=4, zero=1, micro_batch=2, sequence_parallel=True)
    for framework in ("frenzy", "megatron", "torchtitan"):
        default = estimate_memory(CATALOG["llama2-7b"], R, plan, 2048, framework=framework)
        explicit = estimate_memory(CATALOG["llama2-7b"], R, plan, 2048, framework=framework,
                                   pipeline_split=PipelineSplit(((8,),) * 4))
        assert default == explicit


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(2, 16), st.sampled_from(["frenzy", "torchtitan"]),
       st.sampled_from([0, 1]), st.sampled_from(["none", "full"]), st.integers(1, 8))
def test_uneven_peak_is_never_below_the_even_formula_per_stage(layers, pp, framework, zero,
                                                               recompute, accum):
    """Spread as evenly as possible, every stage holds at least floor(L / pp) layers, so the
    peak over stages is at least the even-split formula's for pp stages of floor(L / pp)."""
    if pp > layers or layers % pp == 0:
        return  # an even split is the even formula itself
    arch = replace(GPT2, num_layers=layers)
    base = replace(GPT2, num_layers=pp * (layers // pp))
    plan = ParallelPlan(dp=2, pp=pp, zero=zero, micro_batch=1, recompute=recompute)
    uneven = estimate_memory(arch, R, plan, 512, grad_accum=accum, framework=framework)
    even = estimate_memory(base, R, plan, 512, grad_accum=accum, framework=framework)
    assert uneven.peak_allocated_bytes >= even.peak_allocated_bytes
    assert uneven.device_peak_bytes >= even.device_peak_bytes


def test_plan_search_offers_only_pipelines_that_divide_the_layers_for_now():
    """126 layers = 2 x 63: pp 2 only, whatever the stack (plans.model_parallel_shapes says why the
    search does not offer uneven splits yet); MARP still predicts an uneven plan given to it,
    and the reference trainer's launcher runs it (frenzy.runnable)."""
    from frenzy.catalog.gpus import gpu_catalog

    gpu = gpu_catalog()["H100-80GB"]
    shapes = model_parallel_shapes(LLAMA405B, gpu, 512)
    assert {pp for _, pp in shapes} == {1, 2}
    assert runnable_plan(LLAMA405B, ParallelPlan(dp=1, tp=8, pp=8), seq_len=8192,
                         global_batch=64) is None
    est = estimate_memory(LLAMA405B, R, ParallelPlan(dp=1, tp=8, pp=8, micro_batch=1), 8192,
                          framework="torchtitan", grad_accum=8)
    assert est.peak_allocated_bytes > 0


def test_torchtitan_pipelines_keep_weights_gathered_and_gradients_unsharded():
    """pp > 1: FSDP2 without reshard (apply_fsdp) and no-sync backward under
    torch.distributed.pipelining: 16-bit weights and fp32 gradients of the stage's whole
    parameters, masters and moments over dp (ZeRO-1's terms); pp 1 keeps FSDP's."""
    from frenzy_predictor.stacks import torchtitan_plan_as_run

    plan = ParallelPlan(dp=8, tp=8, pp=8, zero=2, micro_batch=1, recompute="full",
                        sequence_parallel=True)
    assert torchtitan_plan_as_run(plan) == replace(plan, zero=1)
    assert torchtitan_plan_as_run(replace(plan, pp=1)) == replace(plan, pp=1)
    est = estimate_memory(LLAMA405B, R, plan, 8192, framework="torchtitan", grad_accum=8,
                          stage=1)
    params = stage_params(LLAMA405B, plan, 1, 16)
    padded = -(-params // 8) * 8
    assert est.breakdown["parameters"] == -(-padded * 2 // 512) * 512
    assert est.breakdown["gradients"] == -(-padded * 4 // 512) * 512
    assert est.breakdown["pipeline_buffers"] > 0
