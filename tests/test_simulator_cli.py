"""`frenzy simulate`: JSON schema, --compare, and bad input exiting 2 with the field named."""
from __future__ import annotations

import json

from click.testing import CliRunner

from frenzy.tools.cli import cli
from frenzy_scheduler.cli_simulate import REQUIRED_KEYS

TRACE = "tests/data/trace_philly_150.csv"
CLUSTER = "deploy/clusters/frenzy-288.yaml"


def run(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


def test_json_has_the_documented_keys(tmp_path) -> None:
    small = tmp_path / "small.yaml"  # 40 jobs can load 12 GPUs, not 288
    small.write_text("node_groups:\n  - {gpu_type: V100-32GB, gpus_per_node: 8, nodes: 1}\n"
                     "  - {gpu_type: T4, gpus_per_node: 2, nodes: 2}\n")
    result = run("--trace", TRACE, "--cluster", str(small), "--policy", "has", "--jobs", "40",
                 "--load", "0.9", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(REQUIRED_KEYS) <= set(data)
    assert data["input"]["jobs"] == 40 and abs(data["input"]["offered_load"] - 0.9) < 1e-3
    assert data["completed"] + data["unschedulable"] == 40
    assert {"gpu_hours", "restarts", "p99_queue_s", "reshapes", "utilization_over_time",
            "slowest_1pct_jct_s"} <= set(data)
    assert data["slowest_1pct_jct_s"] >= data["p99_jct_s"] - 1e-6  # the tail beyond p99
    assert data["input"]["launch_overhead_s"] == 60.0  # realism defaults
    assert data["input"]["duration_error_sigma"] == 0.3
    assert data["input"]["reshape_guard_s"] == 0.0  # no guard: the baselines as their originals
    assert data["input"]["redecide_s"] == 60.0  # asked again while jobs wait, as live


def test_the_reshape_guard_holds_elastic_sia_to_the_live_systems_interval() -> None:
    """The flag reaches the engine: on the same input, the orchestrator's 600 s guard changes
    elastic Sia's run (what it allows is tests/test_simulator_engine.py's), and the JSON
    says which guard ran."""
    args = ("--trace", TRACE, "--cluster", CLUSTER, "--policy", "sia", "--jobs", "60", "--json")
    free = json.loads(run(*args).stdout)
    guarded = json.loads(run(*args, "--reshape-guard-s", "600").stdout)
    assert guarded["input"]["reshape_guard_s"] == 600.0
    assert guarded["completed"] == free["completed"]
    assert guarded["restarts"] != free["restarts"] or guarded["avg_jct_s"] != free["avg_jct_s"]


def test_trace_arrivals_by_default_and_overheads_cost_time(tmp_path) -> None:
    args = ("--trace", TRACE, "--cluster", CLUSTER, "--policy", "fifo", "--jobs", "20", "--json")
    free = json.loads(run(*args, "--launch-overhead-s", "0", "--restart-overhead-s", "0",
                          "--duration-error-sigma", "0").stdout)
    costly = json.loads(run(*args, "--launch-overhead-s", "600").stdout)
    assert free["input"]["load"] == 0.0  # no --load: the trace's own arrival times
    assert costly["avg_jct_s"] > free["avg_jct_s"] + 500.0


def test_compare_runs_every_policy_on_the_same_input() -> None:
    result = run("--trace", TRACE, "--cluster", CLUSTER, "--jobs", "30", "--compare", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"fifo", "frenzy", "frenzy-narrow", "sia", "sia-static", "has"} <= set(data["policies"])
    assert data["ratios"]["best_baseline"] in data["policies"]
    table = run("--trace", TRACE, "--cluster", CLUSTER, "--jobs", "30", "--compare")
    assert table.exit_code == 0 and "against the best baseline" in table.output


def test_bad_input_exits_2_naming_the_field(tmp_path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("node_groups:\n  - {gpu_type: Z9000, gpus_per_node: 8, nodes: 1}\n")
    cases = [
        (("--trace", "missing.csv", "--cluster", CLUSTER), "--trace"),
        (("--trace", TRACE, "--cluster", "missing.yaml"), "--cluster"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--policy", "nope"), "--policy"),
        (("--trace", TRACE, "--cluster", str(bad_yaml)), "node_groups[0].gpu_type"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--jobs", "-1"), "--jobs"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--start", "not-a-time"), "--start"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--launch-overhead-s", "-1"), "--launch-overhead-s"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--duration-error-sigma", "-0.1"),
         "--duration-error-sigma"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--reshape-guard-s", "-5"), "--reshape-guard-s"),
        (("--trace", TRACE, "--cluster", CLUSTER, "--redecide-s", "-1"), "--redecide-s"),
    ]
    for args, field in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert field in result.output, (args, result.output)
