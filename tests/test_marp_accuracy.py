"""The analytical model against the exact CPU profiler on a few small configs (drift fails CI)."""
from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")

from frenzy.catalog.models import model_catalog  # noqa: E402
from frenzy.domain import ParallelPlan, Recipe  # noqa: E402
from frenzy_predictor.memory import estimate_memory  # noqa: E402
from frenzy_predictor.plans import make_plan  # noqa: E402
from frenzy_predictor.profiler import profile_step  # noqa: E402

pytestmark = pytest.mark.torch

# (model, seq_len, micro_batch, dp, zero, recompute, recipe overrides)
CONFIGS = [
    ("gpt2", 512, 2, 1, 0, "none", {}),
    ("gpt2", 512, 2, 4, 1, "selective", {"attention": "eager", "dropout": 0.1}),
    ("gpt2", 256, 2, 2, 3, "full", {}),
    ("tiny-llama", 256, 2, 1, 0, "none", {"grad_dtype": "16bit"}),
    ("tiny-llama", 128, 4, 2, 2, "none", {"attention": "eager"}),
    ("tiny-gpt2", 256, 2, 1, 0, "full", {"precision": "fp32", "optimizer": "sgd"}),
    ("llama3.2-1b", 512, 1, 8, 3, "none", {}),  # peak at the tied embedding's backward
    ("tinyllama-1.1b", 128, 1, 2, 3, "none", {}),  # peak at the untied root's reduce-scatter
    ("tiny-llama", 128, 1, 8, 3, "full", {}),  # block 1: prefetch + held reduce-scatter input
    ("gpt2", 128, 1, 8, 2, "none", {}),  # ZeRO-2 block L-2: blocks reshard after backward
]


def _id(c) -> str:
    return f"{c[0]}-s{c[1]}-b{c[2]}-dp{c[3]}-z{c[4]}-{c[5]}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_prediction_matches_profiler(cfg):
    name, s, b, dp, zero, recompute, overrides = cfg
    arch, recipe = model_catalog()[name], replace(Recipe(), **overrides)
    measured = profile_step(arch, recipe, seq_len=s, micro_batch=b, dp=dp, zero=zero,
                            recompute=recompute).peak_tensor_bytes
    predicted = estimate_memory(arch, recipe, ParallelPlan(dp=dp, zero=zero, micro_batch=b,
                                                           recompute=recompute), s,
                                grad_accum=1).peak_tensor_bytes
    error = (predicted - measured) / measured
    assert -0.02 <= error <= 0.05, f"predicted {predicted}, measured {measured} ({error:+.2%})"


# Tensor- and pipeline-parallel plans as MARP offers them (sequence parallel with tp, at least pp
# micro-batches), profiled on the trainer's ParallelTrainer:
# (model, seq_len, micro_batch, dp, zero, recompute, recipe overrides, tp, pp, grad_accum)
PARALLEL_CONFIGS = [
    ("tiny-llama", 256, 2, 1, 0, "none", {}, 2, 1, 1),  # replicated logits, gathered norm outputs
    ("tiny-llama", 128, 1, 2, 3, "none", {}, 2, 1, 2),  # FSDP ZeRO-3 under tp
    ("tiny-gpt2", 128, 2, 1, 0, "full", {}, 1, 2, 4),  # 1F1B, tied embedding split over stages
    ("tiny-llama", 128, 2, 2, 1, "none", {}, 2, 2, 4),  # tp x pp x dp
]


def _parallel_id(c) -> str:
    return f"{c[0]}-s{c[1]}-b{c[2]}-dp{c[3]}-z{c[4]}-{c[5]}-tp{c[7]}-pp{c[8]}-ga{c[9]}"


@pytest.mark.parametrize("cfg", PARALLEL_CONFIGS, ids=_parallel_id)
def test_tensor_and_pipeline_parallel_predictions_match_the_profiler(cfg):
    name, s, b, dp, zero, recompute, overrides, tp, pp, accum = cfg
    arch, recipe = model_catalog()[name], replace(Recipe(), **overrides)
    profile = profile_step(arch, recipe, seq_len=s, micro_batch=b, dp=dp, zero=zero,
                           recompute=recompute, tp=tp, pp=pp, grad_accum=accum)
    predicted = estimate_memory(arch, recipe, make_plan(tp, pp, dp, zero, b, recompute), s,
                                grad_accum=accum)
    error = (predicted.peak_tensor_bytes - profile.peak_tensor_bytes) / profile.peak_tensor_bytes
    assert -0.02 <= error <= 0.05, (f"predicted {predicted.peak_tensor_bytes}, measured "
                                    f"{profile.peak_tensor_bytes} ({error:+.2%})")
    assert profile.peak_stage == predicted.peak_stage
    assert profile.config["tp"] == tp and profile.config["pp"] == pp


def test_the_profiler_refuses_a_plan_the_trainer_cannot_run():
    with pytest.raises(ValueError, match="plan.micro_batch"):  # 1F1B: fewer micro-batches than stages
        profile_step(model_catalog()["tiny-llama"], Recipe(), seq_len=64, micro_batch=1, pp=2)


def test_peak_tensors_add_up_to_the_peak():
    arch = model_catalog()["tiny-llama"]
    profile = profile_step(arch, Recipe(), seq_len=64, micro_batch=2, dp=2, zero=3, peak_tensors=True)
    assert sum(t["bytes"] for t in profile.peak_tensors) == profile.peak_tensor_bytes
    sizes = [t["bytes"] for t in profile.peak_tensors]
    assert sizes == sorted(sizes, reverse=True)
    assert {"category", "op", "dtype", "shape", "phase_allocated"} <= set(profile.peak_tensors[0])
    assert profile_step(arch, Recipe(), seq_len=64, micro_batch=2).peak_tensors == []


def test_profile_cli_takes_tp_and_pp_and_names_what_the_trainer_refuses():
    import json

    from click.testing import CliRunner

    from frenzy.tools.cli import cli

    bad = CliRunner().invoke(cli, ["profile", "--model", "tiny-llama", "--seq-len", "64", "--pp", "2"])
    assert bad.exit_code == 2 and "plan.micro_batch" in bad.output
    ok = CliRunner().invoke(cli, ["profile", "--model", "tiny-llama", "--seq-len", "64", "--tp", "2",
                                  "--micro-batch", "2", "--json"])
    assert ok.exit_code == 0, ok.output
    out = json.loads(ok.output[ok.output.index("{"):])
    assert out["config"]["tp"] == 2 and out["config"]["sequence_parallel"]
    assert abs(out["prediction_error_pct"]) < 2
