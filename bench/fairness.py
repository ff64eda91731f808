"""Two tenants with weights 2:1 share a saturated cluster in the simulator: each tenant's GPU
share over time against its weight, and what fairness costs in JCT against `has` without
tenants. Both runs use the same jobs (a Philly window mapped to LLM jobs by MARP), the same
cluster and the same HAS policy; `has+fair` only wraps it in `frenzy_scheduler.fairshare`.

Tenants: jobs alternate between A and B in arrival order, so both offer the same load; the
window's arrivals are compressed to `--load` times the cluster's capacity (saturated).
Shares are measured in 5-minute windows while both tenants have jobs waiting (contention),
as A's GPU-seconds over all GPU-seconds used in that window. Saves bench/results/fairness.json.

    .venv/bin/python bench/fairness.py [--jobs 1000] [--load 2.0] [--start 15000]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.fairshare import FairSharePolicy, TenantShare
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.simulator import prepare_jobs
from frenzy_scheduler.simulator.engine import simulate
from frenzy_scheduler.simulator.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
PHILLY = Path("/work/shared/data/traces/philly.csv")
CLUSTER = ROOT / "deploy" / "clusters" / "frenzy-288.yaml"
WINDOW_S = 300.0
WEIGHTS = {"A": 2.0, "B": 1.0}


def jct_stats(records, tenant_of, tenant: str | None = None) -> dict:
    jcts = sorted(r.end_time_s - r.submit_time_s for r in records
                  if not math.isnan(r.end_time_s) and (tenant is None or tenant_of[r.job_id] == tenant))
    if not jcts:
        return {"jobs": 0}
    return {"jobs": len(jcts), "avg_jct_h": round(statistics.fmean(jcts) / 3600, 3),
            "p50_jct_h": round(jcts[len(jcts) // 2] / 3600, 3),
            "p99_jct_h": round(jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] / 3600, 3)}


def shares_over_time(records, tenant_of) -> list[dict]:
    """Per window under contention: A's share of the GPU-seconds used."""
    done = [r for r in records if not math.isnan(r.end_time_s)]
    start = min(r.submit_time_s for r in done)
    end = max(r.end_time_s for r in done)
    out = []
    t = start
    while t < end:
        hi = t + WINDOW_S
        used = {"A": 0.0, "B": 0.0}
        waiting = {"A": False, "B": False}
        for r in done:
            overlap = min(hi, r.end_time_s) - max(t, r.start_time_s)
            if overlap > 0:
                used[tenant_of[r.job_id]] += overlap * r.num_gpus
            if r.submit_time_s < hi and r.first_start_s > t:  # waited during this window
                waiting[tenant_of[r.job_id]] = True
        total = used["A"] + used["B"]
        if total > 0 and all(waiting.values()):
            out.append({"from_h": round((t - start) / 3600, 2), "share_a": round(used["A"] / total, 3)})
        t = hi
    return out


def run(name: str, jobs, groups, tenant_of) -> dict:
    policy = get_policy("has")
    if name == "has+fair":
        policy = FairSharePolicy(policy, tenant_of.__getitem__,
                                 lambda: {t: TenantShare(w) for t, w in WEIGHTS.items()})
    started = time.perf_counter()
    result = simulate(jobs, build_cluster(groups), policy)
    series = shares_over_time(result.records, tenant_of)
    shares = [w["share_a"] for w in series]
    target = WEIGHTS["A"] / sum(WEIGHTS.values())
    return {"policy": name, "wall_s": round(time.perf_counter() - started, 1),
            # At most 40 points per run: each the mean of consecutive contended windows.
            "series_share_a": _coarse([w["share_a"] for w in series], 40),
            "all": jct_stats(result.records, tenant_of),
            "A (weight 2)": jct_stats(result.records, tenant_of, "A"),
            "B (weight 1)": jct_stats(result.records, tenant_of, "B"),
            "contended_windows": len(shares),
            "share_a_mean": round(statistics.fmean(shares), 3) if shares else None,
            "share_a_target": round(target, 3),
            "share_a_mean_abs_error": round(statistics.fmean(abs(s - target) for s in shares), 3) if shares else None,
            "unfinished": len(result.stranded)}


def _coarse(values: list[float], points: int) -> list[float]:
    if not values:
        return []
    step = max(1, math.ceil(len(values) / points))
    return [round(statistics.fmean(values[i:i + step]), 3) for i in range(0, len(values), step)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--load", type=float, default=2.0)
    parser.add_argument("--starts", type=int, nargs="+", default=[5_000, 15_000, 35_000],
                        help="trace job index of each window")
    args = parser.parse_args()
    trace = load_trace(PHILLY)
    groups = load_cluster_file(CLUSTER)
    windows = []
    for start in args.starts:
        jobs = prepare_jobs(trace, groups, start_s=trace[start].submit_time_s, count=args.jobs,
                            load=args.load, seed=0)
        tenant_of = {j.job_id: "AB"[i % 2] for i, j in enumerate(sorted(jobs, key=lambda j: j.submit_time_s))}
        windows.append({"start_index": start, "jobs": len(jobs),
                        "runs": [run(name, jobs, groups, tenant_of) for name in ("has", "has+fair")]})
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs shared",
              "trace": str(PHILLY), "cluster": CLUSTER.name, "load": args.load,
              "weights": WEIGHTS, "window_s": WINDOW_S, "windows": windows}
    for r in (r for w in windows for r in w["runs"]):
        print(f"{r['policy']:>9}: A's share {r['share_a_mean']} (target {r['share_a_target']}, mean |error| "
              f"{r['share_a_mean_abs_error']}) over {r['contended_windows']} contended windows; avg JCT "
              f"{r['all'].get('avg_jct_h')} h (A {r['A (weight 2)'].get('avg_jct_h')} h, "
              f"B {r['B (weight 1)'].get('avg_jct_h')} h); p99 {r['all'].get('p99_jct_h')} h; "
              f"unfinished {r['unfinished']}")
    out = ROOT / "bench" / "results" / "fairness.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
