"""Plans a launcher cannot run: MARP never offers one, and the trainer refuses it alike
(frenzy.runnable.runnable_plan, the one check both apply)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy.catalog.gpus import get_gpu
from frenzy.catalog.models import load_model
from frenzy.domain import ParallelPlan, Recipe, TrainingSpec
from frenzy.runnable import pipeline_micro_batches, runnable_plan
from frenzy_predictor.plans import enumerate_options

TYPES = [get_gpu(n) for n in ("A10", "A100-40GB", "A100-80GB", "H100-80GB")]
LLAMA7B = load_model("llama2-7b")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["tiny-llama", "llama3.2-1b", "llama2-7b", "llama2-13b", "mistral-7b"]),
       st.integers(64, 4100), st.integers(1, 64), st.sampled_from(["frenzy", "torchtitan"]))
def test_every_option_offered_is_runnable(model, seq_len, global_batch, framework):
    """Odd sequence lengths and small batches included: the jobs that used to get plans their
    launcher refused (sequence parallelism over an odd seq_len, 1F1B with fewer micro-batches
    than stages)."""
    arch = load_model(model)
    training = TrainingSpec(seq_len, global_batch, 10**9, Recipe(framework=framework))
    for option in enumerate_options(arch, training, TYPES):
        assert runnable_plan(arch, option.plan, seq_len=seq_len, global_batch=global_batch,
                             framework=framework) is None, option.plan.describe()


def test_a_7b_job_with_an_odd_sequence_gets_no_tensor_parallel_plan():
    training = TrainingSpec(4095, 64, 10**10)
    options = enumerate_options(LLAMA7B, training, TYPES)
    assert options and all(o.plan.tp == 1 for o in options)
    assert any(o.plan.tp > 1 for o in enumerate_options(LLAMA7B, TrainingSpec(4096, 64, 10**10),
                                                        TYPES))


def test_pipelines_get_at_least_one_micro_batch_per_stage():
    for batch in (2, 4, 8):
        options = enumerate_options(LLAMA7B, TrainingSpec(2048, batch, 10**10), TYPES)
        assert options
        assert all(pipeline_micro_batches(o.plan, batch) >= o.plan.pp for o in options)


@pytest.mark.parametrize("plan, seq_len, batch, framework, field", [
    (ParallelPlan(tp=3), 4096, 8, "frenzy", "plan.tp"),  # 32 kv heads
    (ParallelPlan(tp=2, sequence_parallel=True), 4095, 8, "frenzy", "plan.sequence_parallel"),
    (ParallelPlan(pp=64), 4096, 64, "frenzy", "plan.pp"),  # 32 layers
    (ParallelPlan(pp=4, micro_batch=4), 4096, 8, "frenzy", "plan.micro_batch"),  # 2 < 4
    (ParallelPlan(pp=4, micro_batch=4), 4096, 8, "torchtitan", "plan.micro_batch"),
    (ParallelPlan(dp=2, micro_batch=3), 4096, 8, "frenzy", "plan.micro_batch"),
    (ParallelPlan(cp=2), 4096, 8, "frenzy", "plan.cp"),
])
def test_the_reason_names_the_field(plan, seq_len, batch, framework, field):
    reason = runnable_plan(LLAMA7B, plan, seq_len=seq_len, global_batch=batch, framework=framework)
    assert reason and reason.startswith(field)


def test_other_launchers_are_not_held_to_the_reference_trainers_rules():
    # Megatron's 1F1B runs fewer micro-batches than stages (warm-up min(pp - rank - 1, m))
    plan = ParallelPlan(tp=2, pp=4, micro_batch=4, sequence_parallel=True)
    assert runnable_plan(LLAMA7B, plan, seq_len=4096, global_batch=8, framework="megatron") is None
    assert runnable_plan(LLAMA7B, plan, seq_len=4096, global_batch=8) is not None


@pytest.mark.parametrize("plan, field", [
    ({"tp": 2, "sequence_parallel": True}, "plan.sequence_parallel"),  # seq_len 63
    ({"pp": 2, "micro_batch": 8}, "plan.micro_batch"),  # one micro-batch, two stages
])
def test_the_trainer_refuses_what_marp_never_offers_with_the_same_reason(plan, field):
    pytest.importorskip("torch")
    from frenzy_trainer.train import ConfigError, DistEnv, check_plan, load_config

    config, parsed = load_config(["--model", "tiny-llama", "--steps", "1", "--seq-len", "63",
                                  "--global-batch", "8"], {"FRENZY_PLAN": json.dumps(plan)})
    arch = load_model("tiny-llama")
    with pytest.raises(ConfigError) as err:
        check_plan(arch, config, parsed, DistEnv(parsed.num_gpus, 0, 0, parsed.num_gpus, "", 0))
    assert str(err.value) == runnable_plan(arch, parsed, seq_len=63, global_batch=8)
    assert str(err.value).startswith(field)
