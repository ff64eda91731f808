"""`frenzy predict`: JSON contract and exit code 2 naming the bad option."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from frenzy.tools.cli import cli

BASE = ["predict", "--model", "tiny-gpt2", "--seq-len", "256", "--global-batch", "8"]
FIXED = BASE + ["--gpu-type", "A100-80GB", "--dp", "2", "--micro-batch", "4"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_lists_plans_per_gpu_type_as_json():
    result = run(*BASE, "--steps", "100", "--gpu-types", "T4,A100-80GB", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows and {r["gpu_type"] for r in rows} == {"T4", "A100-80GB"}
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for row in rows:
        assert set(row) >= {"rank", "gpu_type", "num_gpus", "plan", "grad_accum",
                            "peak_bytes_per_gpu", "step_time_s", "duration_s", "gpu_hours"}
        assert set(row["plan"]) == {"dp", "tp", "pp", "zero", "micro_batch", "recompute", "cp", "ep",
                                    "sequence_parallel"}
        assert row["duration_s"] == pytest.approx(100 * row["step_time_s"])


def test_lists_plans_as_a_table():
    result = run(*BASE, "--gpu-types", "H100-80GB")
    assert result.exit_code == 0, result.output
    assert "H100-80GB" in result.output and "dp1-tp1-pp1" in result.output


def test_fixed_plan_json_keys():
    result = run(*FIXED, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) >= {"peak_tensor_bytes", "peak_bytes", "breakdown", "fits", "step_time_s",
                         "num_gpus", "plan", "usable_bytes", "duration_s"}
    assert data["fits"] is True and data["num_gpus"] == 2 and data["plan"]["micro_batch"] == 4
    assert data["peak_bytes"] >= data["peak_tensor_bytes"] > 0


def test_fixed_plan_says_when_the_launcher_refuses_it():
    refused = run(*BASE, "--gpu-type", "A100-80GB", "--pp", "2", "--micro-batch", "8", "--json")
    assert refused.exit_code == 0, refused.output
    assert json.loads(refused.output)["launcher_refuses"].startswith("plan.micro_batch")  # 1F1B
    assert json.loads(run(*FIXED, "--json").output)["launcher_refuses"] is None
    table = run(*BASE, "--gpu-type", "A100-80GB", "--pp", "2", "--micro-batch", "8")
    assert "refuses" in table.output


def test_fixed_plan_that_does_not_fit():
    result = run("predict", "--model", "llama2-70b", "--seq-len", "4096", "--global-batch", "8",
                 "--gpu-type", "T4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["fits"] is False


def test_fixed_plan_table():
    result = run(*FIXED, "--recompute", "full")
    assert result.exit_code == 0, result.output
    assert "fits" in result.output


@pytest.mark.parametrize("args, option", [
    (["predict", "--model", "no-such-model", "--seq-len", "256", "--global-batch", "8"], "--model"),
    (BASE + ["--gpu-type", "A100-80GB", "--tp", "3"], "--tp"),
    (BASE + ["--gpu-type", "A100-80GB", "--pp", "3", "--framework", "megatron"], "--pp"),
    (BASE + ["--gpu-type", "A100-80GB", "--pp", "64"], "--pp"),  # more stages than layers
    (BASE + ["--gpu-type", "A100-80GB", "--dp", "0"], "--dp"),
    (BASE + ["--gpu-type", "A100-80GB", "--micro-batch", "-1"], "--micro-batch"),
    (BASE + ["--gpu-type", "A100-80GB", "--dp", "3"], "--micro-batch"),
    (["predict", "--model", "llama2-7b", "--seq-len", "256", "--global-batch", "8",
      "--gpu-type", "T4", "--tp", "8"], "--tp"),  # a T4 node has 4 GPUs
    (BASE + ["--gpu-type", "NoSuchGPU"], "--gpu-type"),
    (BASE + ["--gpu-types", "A100-80GB,NoSuchGPU"], "--gpu-types"),
    (["predict", "--model", "tiny-gpt2", "--seq-len", "0", "--global-batch", "8"], "--seq-len"),
    (["predict", "--model", "tiny-llama", "--seq-len", str(1 << 30), "--global-batch", "8"],
     "--seq-len"),
    (["predict", "--model", "tiny-gpt2", "--seq-len", "4096", "--global-batch", "8"], "--seq-len"),
    (["predict", "--model", "tiny-gpt2", "--seq-len", "256", "--global-batch", "-4"],
     "--global-batch"),
    (BASE + ["--tokens", "-5"], "--tokens"),
    (BASE + ["--steps", "abc"], "--steps"),
    (BASE + ["--dropout", "1.5"], "--dropout"),
    (BASE + ["--precision", "fp8"], "--precision"),
])
def test_bad_input_exits_2_naming_the_option(args, option):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_unknown_model_type_in_config_json(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    result = run("predict", "--model", str(config), "--seq-len", "128", "--global-batch", "8")
    assert result.exit_code == 2
    assert "model_type" in result.output


def test_hf_config_json_is_accepted(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 688,
        "vocab_size": 1000, "max_position_embeddings": 512}))
    result = run("predict", "--model", str(config), "--seq-len", "128", "--global-batch", "8",
                 "--gpu-types", "T4", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)


def test_plan_flags_need_a_gpu_type():
    result = run(*BASE, "--dp", "2")
    assert result.exit_code == 2 and "--gpu-type" in result.output


def test_tokens_and_steps_are_exclusive():
    result = run(*BASE, "--tokens", "1e6", "--steps", "10")
    assert result.exit_code == 2


def test_fixed_plan_reports_three_peaks_and_the_framework():
    result = run(*FIXED, "--json", "--framework", "megatron")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["framework"] == "megatron"
    assert data["peak_allocated_bytes"] < data["peak_reserved_bytes"] < data["device_peak_bytes"]
    assert data["peak_tensor_bytes"] == data["peak_allocated_bytes"]
    assert data["peak_bytes"] == data["device_peak_bytes"]
    frenzy = json.loads(run(*FIXED, "--json").output)
    assert frenzy["framework"] == "frenzy"
    assert frenzy["peak_allocated_bytes"] != data["peak_allocated_bytes"]  # the loss differs


def test_all_of_dp_tp_pp_is_a_fixed_plan_without_gpu_type():
    result = run("predict", "--model", "gpt2", "--seq-len", "512", "--global-batch", "8",
                 "--dp", "2", "--tp", "1", "--pp", "1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["gpu_type"] == "H100-80GB" and data["num_gpus"] == 2


def test_unknown_framework_exits_2_naming_the_option():
    result = run(*FIXED, "--framework", "jax")
    assert result.exit_code == 2 and "--framework" in result.output


def test_cp_and_ep_in_a_fixed_plan_and_ep_in_the_search():
    moe = ["predict", "--model", "mixtral-8x7b", "--seq-len", "4096", "--global-batch", "64"]
    result = run(*moe, "--dp", "8", "--tp", "1", "--pp", "1", "--ep", "8", "--cp", "2", "--zero",
                 "3", "--recompute", "full", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["plan"]["ep"] == 8 and data["plan"]["cp"] == 2 and data["num_gpus"] == 16
    searched = run(*moe, "--gpu-types", "H100-80GB", "--ep", "8", "--json")
    assert searched.exit_code == 0, searched.output
    assert all(o["plan"]["ep"] == 8 for o in json.loads(searched.output))


@pytest.mark.parametrize("args, option", [
    (["--ep", "2"], "--ep"),  # tiny-gpt2 is dense
    (["--cp", "3"], "--cp"),  # 256 tokens do not split in 3
])
def test_bad_cp_or_ep_exits_2_naming_the_option(args, option):
    result = run(*FIXED, *args)
    assert result.exit_code == 2 and option in result.output, result.output


def test_learned_margins_from_a_file_are_shown_and_applied(tmp_path):
    from frenzy_predictor.error_table import margin_key

    path = tmp_path / "margins.json"
    path.write_text(json.dumps({margin_key("frenzy", "gpt2", "A100-80GB"): 1.2}))
    plain = json.loads(run(*FIXED, "--json").output)
    guarded = json.loads(run(*FIXED, "--json", "--margins", str(path)).output)
    assert plain["memory_margin"] == 1.0 and guarded["memory_margin"] == 1.2
    listed = json.loads(run(*BASE, "--gpu-types", "A100-80GB", "--json", "--margins", str(path)).output)
    assert listed and all(o["memory_margin"] == 1.2 for o in listed)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    result = run(*FIXED, "--margins", str(bad))
    assert result.exit_code == 2 and "--margins" in result.output


def test_the_option_table_names_the_recipe_and_the_margins_applied(tmp_path):
    from frenzy_predictor.error_table import margin_key

    path = tmp_path / "margins.json"
    path.write_text(json.dumps({margin_key("hf", "gpt2", "A100-80GB"): 1.3}))
    result = run(*BASE, "--gpu-types", "A100-80GB", "--framework", "hf", "--margins", str(path))
    assert result.exit_code == 0, result.output
    assert "hf recipe" in result.output and "A100-80GB x1.3" in result.output


def test_fixed_uneven_pipeline_prints_the_plan_and_its_stages():
    """126 layers over pp 8 (issue 10): torchtitan's own split, Megatron's with its flags; Megatron
    without them refuses naming --pp, a flag for another stack names itself."""
    job = ["predict", "--model", "llama3.1-405b", "--seq-len", "8192", "--global-batch", "256",
           "--dp", "8", "--tp", "8", "--pp", "8", "--zero", "1", "--recompute", "full",
           "--sequence-parallel", "--gpu-type", "H100-80GB", "--json"]
    titan = run(*job, "--framework", "torchtitan")
    assert titan.exit_code == 0, titan.output
    assert json.loads(titan.output)["stage_layers"] == [15, 16, 16, 16, 16, 16, 16, 15]
    megatron = run(*job, "--framework", "megatron", "--first-stage-layers", "15",
                   "--last-stage-layers", "15")
    assert megatron.exit_code == 0, megatron.output
    assert json.loads(megatron.output)["stage_layers"] == [15, 16, 16, 16, 16, 16, 16, 15]
    for extra, option in ((["--framework", "megatron"], "--pp"),
                          (["--framework", "megatron", "--first-stage-layers", "14",
                            "--last-stage-layers", "15"], "--first-stage-layers"),
                          (["--framework", "torchtitan", "--account-for-loss"],
                           "--account-for-loss")):
        refused = run(*job, *extra)
        assert refused.exit_code == 2 and option in refused.output, refused.output
