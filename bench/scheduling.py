"""Scheduling benchmark: every policy on Philly windows, on two clusters, plus an overhead sweep.

    .venv/bin/python bench/scheduling.py            # full run (~10 min on 2 cores)
    .venv/bin/python bench/scheduling.py --quick    # 2 windows, small sweep

Writes bench/results/scheduling.json and prints one table per cluster. See docs/simulator.md.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from frenzy_scheduler.clusterfile import NodeGroup, build_cluster, load_cluster_file, scale_groups
from frenzy_scheduler.core import ClusterView, QueuedJob, RunningJob
from frenzy_scheduler.policies import BASELINES, get_policy, policy_names
from frenzy_scheduler.policies.sia import SiaPolicy
from frenzy_scheduler.simulator import prepare_jobs, run_policy
from frenzy_scheduler.simulator.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
PHILLY = Path("/work/shared/data/traces/philly.csv")
if not PHILLY.exists():
    PHILLY = ROOT.parent / "shared/data/traces/philly.csv"
CLUSTERS = {"frenzy-288": ROOT / "deploy/clusters/frenzy-288.yaml",
            "alibaba-2026-492": ROOT / "deploy/clusters/alibaba-2026-492.yaml"}
WINDOW_JOBS = 500
WINDOW_STARTS = (5_000, 15_000, 25_000, 35_000, 45_000)  # trace job index of each window's start
LOAD = 0.85  # offered GPU demand over capacity while jobs arrive
SIA_SWEEP_CAP_S = 10.0  # HiGHS time cap per sia decision in the overhead sweep

console = Console(stderr=True)


def window_runs(trace: list, groups: list[NodeGroup], starts: tuple[int, ...],
                policies: list[str]) -> list[dict[str, Any]]:
    runs = []
    for start_index in starts:
        start_s = trace[start_index].submit_time_s
        jobs = prepare_jobs(trace, groups, start_s=start_s, count=WINDOW_JOBS, load=LOAD, seed=0)
        window = {"start_index": start_index, "start_s": start_s, "policies": {}}
        for name in policies:
            tick = time.perf_counter()
            window["policies"][name] = run_policy(name, jobs, groups)
            console.log(f"window {start_index} {name}: avg JCT "
                        f"{window['policies'][name]['avg_jct_s'] / 3600:.2f} h "
                        f"({time.perf_counter() - tick:.1f} s)")
        runs.append(window)
    return runs


def summarize_cluster(runs: list[dict[str, Any]], policies: list[str]) -> dict[str, Any]:
    def mean(name: str, key: str) -> float:
        return statistics.fmean(r["policies"][name][key] for r in runs)

    summary: dict[str, Any] = {"per_policy": {}, "has_vs": {}}
    for name in policies:
        summary["per_policy"][name] = {key: mean(name, key) for key in (
            "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "utilization",
            "utilization_arrivals", "decision_p50_s", "decision_p99_s", "decision_total_s",
            "unschedulable")}
    if "has" in policies:
        for name in policies:
            if name == "has":
                continue
            per_window = [r["policies"]["has"]["avg_jct_s"] / r["policies"][name]["avg_jct_s"]
                          for r in runs]
            summary["has_vs"][name] = {
                "avg_jct_ratio_mean_over_windows": statistics.fmean(per_window),
                "avg_jct_ratio_per_window": per_window,
                "p99_jct_ratio": mean("has", "p99_jct_s") / mean(name, "p99_jct_s"),
                "decision_p99_ratio": mean("has", "decision_p99_s") / mean(name, "decision_p99_s"),
            }
    return summary


def cluster_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title)
    for column in ("policy", "avg JCT h", "p99 JCT h", "makespan h", "util", "util (arrivals)",
                   "dec p50 ms", "dec p99 ms", "has avg JCT ratio", "has p99 ratio"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, m in summary["per_policy"].items():
        vs = summary["has_vs"].get(name, {})
        table.add_row(name, f"{m['avg_jct_s'] / 3600:.2f}", f"{m['p99_jct_s'] / 3600:.1f}",
                      f"{m['makespan_s'] / 3600:.1f}", f"{m['utilization']:.3f}",
                      f"{m['utilization_arrivals']:.3f}", f"{m['decision_p50_s'] * 1e3:.3f}",
                      f"{m['decision_p99_s'] * 1e3:.3f}",
                      f"{vs['avg_jct_ratio_mean_over_windows']:.3f}" if vs else "-",
                      f"{vs['p99_jct_ratio']:.3f}" if vs else "-")
    return table


def sweep_point(trace: list, gpus: int, queued: int, policies: list[str], reps: int,
                rng: random.Random) -> dict[str, Any]:
    """Time one decision with `queued` jobs on a `gpus`-GPU cluster whose GPUs are half busy."""
    base = load_cluster_file(CLUSTERS["frenzy-288"])
    groups = scale_groups(base, gpus / 288)
    cluster = build_cluster(groups)
    running: list[RunningJob] = []
    for node in cluster.nodes.values():  # half the GPUs busy, each busy node with one job
        busy = node.free_gpus[: rng.randint(0, node.total_gpus)]
        if busy:
            node.free_gpus = node.free_gpus[len(busy):]
            running.append(RunningJob(f"r-{node.node_id}", _any_option(node.gpu_type, len(busy)),
                                      ((node.node_id, tuple(busy)),), 0.0,
                                      rng.uniform(10.0, 1e5)))
    start = rng.randrange(0, len(trace) - queued)
    jobs = prepare_jobs(trace[start:start + queued], groups, seed=rng.randrange(1 << 30))
    queue = [QueuedJob(j.job_id, -rng.uniform(0, 1e4), j.options, j.deadline_s) for j in jobs]
    point: dict[str, Any] = {"gpus": sum(n.total_gpus for n in cluster.nodes.values()),
                             "queued": queued, "policies": {}}
    for name in policies:
        policy = get_policy(name)
        n = reps
        if isinstance(policy, SiaPolicy):
            policy.time_limit_s = SIA_SWEEP_CAP_S
            n = 3 if gpus * queued <= 1000 * 500 else 1
        tick = time.perf_counter()
        policy.schedule(queue, cluster, 0.0, running)  # cold: per-job caches empty
        cold = time.perf_counter() - tick
        times = [cold] if n == 1 else []
        capped = getattr(policy, "last_status", 0) == 1
        for _ in range(n if n > 1 else 0):
            tick = time.perf_counter()
            policy.schedule(queue, cluster, 0.0, running)
            times.append(time.perf_counter() - tick)
            capped = capped or getattr(policy, "last_status", 0) == 1
        times.sort()
        point["policies"][name] = {
            "cold_s": cold, "p50_s": times[len(times) // 2],
            "p99_s": times[min(len(times) - 1, int(0.99 * len(times)))], "samples": len(times),
            "time_capped": capped}
        console.log(f"sweep {gpus} GPUs x {queued} jobs {name}: p50 {point['policies'][name]['p50_s'] * 1e3:.2f} ms"
                    + (" (time cap hit)" if capped else ""))
    return point


def _any_option(gpu_type: str, count: int):
    from frenzy.domain import ParallelPlan, PlanOption
    return PlanOption(gpu_type, ParallelPlan(dp=count), 0, 1.0, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench/results/scheduling.json"))
    args = parser.parse_args()
    policies = policy_names()
    starts = WINDOW_STARTS[:2] if args.quick else WINDOW_STARTS
    trace = load_trace(PHILLY)
    results: dict[str, Any] = {"config": {"trace": str(PHILLY), "window_jobs": WINDOW_JOBS,
                                          "window_starts": list(starts), "load": LOAD,
                                          "policies": policies, "seed": 0}, "clusters": {}}
    for cluster_name, path in CLUSTERS.items():
        groups = load_cluster_file(path)
        runs = window_runs(trace, groups, starts, policies)
        summary = summarize_cluster(runs, policies)
        results["clusters"][cluster_name] = {"windows": runs, "summary": summary}
        Console().print(cluster_table(f"{cluster_name}: {len(starts)} windows x {WINDOW_JOBS} "
                                      f"Philly jobs, offered load {LOAD}", summary))

    rng = random.Random(0)
    grid = [(100, 100), (1000, 500)] if args.quick else [
        (100, 100), (100, 500), (1000, 100), (1000, 500), (1000, 5000), (10000, 500), (10000, 5000)]
    results["overhead_sweep"] = {"sia_time_cap_s": SIA_SWEEP_CAP_S, "points": [
        sweep_point(trace, g, q, policies, 30, rng) for g, q in grid]}
    sweep = Table(title="decision time, steady state (ms): p50 / p99; sia capped at "
                        f"{SIA_SWEEP_CAP_S:.0f} s per decision")
    sweep.add_column("GPUs x queued")
    for name in policies:
        sweep.add_column(name, justify="right")
    sweep.add_column("sia / has p99", justify="right")
    for point in results["overhead_sweep"]["points"]:
        cells = [f"{point['policies'][n]['p50_s'] * 1e3:.2f} / {point['policies'][n]['p99_s'] * 1e3:.2f}"
                 + ("*" if point['policies'][n]['time_capped'] else "") for n in policies]
        ratio = point["policies"]["sia"]["p99_s"] / point["policies"]["has"]["p99_s"]
        sweep.add_row(f"{point['gpus']} x {point['queued']}", *cells, f"{ratio:.0f}x")
    Console().print(sweep)

    tick = time.perf_counter()
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    jobs = prepare_jobs(trace, groups, start_s=trace[5_000].submit_time_s, count=10_000,
                        load=LOAD, seed=0)
    metrics = run_policy("has", jobs, groups)
    total = time.perf_counter() - tick
    results["trace_10k"] = {"policy": "has", "cluster": "frenzy-288", "jobs": 10_000,
                            "wall_s_including_mapping": total, "sim_wall_s": metrics["sim_wall_s"],
                            "metrics": metrics}
    Console().print(f"10,000-job trace on frenzy-288 under has: {total:.1f} s "
                    f"(simulation {metrics['sim_wall_s']:.1f} s)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
