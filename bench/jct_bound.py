"""How close can any policy get? The benchmark's windows against the floor no policy can beat.

For every job of the benchmark's 20 windows (bench/scheduling.py: 5 Philly windows x 2 clusters
x 2 arrival settings, the realism defaults, seed 0), `simulator.bounds.least_jct_s` is the least
JCT the simulator lets any policy give it: started on arrival, alone on the cluster, on its
fastest option (launch overhead included), never moved. Averaged over a window, that is a floor
under every policy's average JCT there, loose wherever jobs contend.

It prints, per setting and window, the floor beside each policy's saved average JCT (from
bench/results/scheduling.json, which the benchmark writes) and the least has / sia ratio any
policy in has's place could reach: floor / sia. The benchmark's headline ratio is the mean over
windows of per-window ratios, so the mean of those floors is the least it can be. Where that is
above a goal (0.85x elastic Sia), the goal cannot be met on that setting by any policy, `has` or
another, in this simulator; where it is below, the goal may or may not be reachable (the floor
ignores contention).

    .venv/bin/python bench/jct_bound.py            # all settings; bench/results/jct_bound.json
    .venv/bin/python bench/jct_bound.py --settings frenzy-288/trace

Not a speed figure; no policy is run.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.simulator import SimConfig, prepare_jobs
from frenzy_scheduler.simulator.bounds import least_jcts_s
from frenzy_scheduler.simulator.trace import load_trace

from scheduling import CLUSTERS, PHILLY, ROOT, WINDOW_JOBS

SAVED = ROOT / "bench/results/scheduling.json"
OUT = ROOT / "bench/results/jct_bound.json"
GOAL_VS_SIA = 0.85  # the goal: has average JCT <= 0.85x elastic sia's
POLICIES = ("sia", "has", "frenzy", "sia-static", "fifo")
console = Console()


def window_floor(trace: list, cluster: str, start_s: float, load: float) -> dict[str, float]:
    """The floor of one window: the mean and the median of its jobs' least JCTs."""
    groups = load_cluster_file(CLUSTERS[cluster])
    jobs = prepare_jobs(trace, groups, start_s=start_s, count=WINDOW_JOBS, load=load, seed=0)
    cluster = FreeIndex(build_cluster(groups))
    floors = list(least_jcts_s(jobs, SimConfig.realistic(), cluster).values())
    return {"jobs": len(jobs), "runnable": len(floors), "avg_floor_s": statistics.fmean(floors),
            "p50_floor_s": statistics.median(floors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settings", default="", help="cluster/load, comma-separated "
                        "(default: every setting in the saved benchmark)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    saved = json.loads(SAVED.read_text())["clusters"]
    wanted = set(args.settings.split(",")) if args.settings else None
    trace = load_trace(PHILLY)
    results: dict[str, Any] = {"goal_vs_sia": GOAL_VS_SIA, "settings": {}}
    for cluster, by_load in saved.items():
        for load_name, setting in by_load.items():
            name = f"{cluster}/{load_name}"
            if wanted is not None and name not in wanted:
                continue
            load = 0.0 if load_name == "trace" else float(load_name.removeprefix("load "))
            table = Table(title=f"{name}: average JCT, h (floor: no policy can beat it)")
            for column in ("window", "floor", *POLICIES, "floor / sia", "has / sia"):
                table.add_column(column, justify="right")
            windows = []
            for window in setting["windows"]:
                floor = window_floor(trace, cluster, window["start_s"], load)
                avg = {p: window["policies"][p]["avg_jct_s"] for p in POLICIES
                       if p in window["policies"]}
                row = {"start_index": window["start_index"], **floor,
                       "avg_jct_s": avg,
                       "floor_over_sia": floor["avg_floor_s"] / avg["sia"],
                       "has_over_sia": avg["has"] / avg["sia"],
                       "over_floor": {p: a / floor["avg_floor_s"] for p, a in avg.items()}}
                windows.append(row)
                table.add_row(str(window["start_index"]), f"{floor['avg_floor_s'] / 3600:.3f}",
                              *(f"{avg[p] / 3600:.3f}" if p in avg else "-" for p in POLICIES),
                              f"{row['floor_over_sia']:.3f}", f"{row['has_over_sia']:.3f}")
            summary = {
                "least_has_over_sia": statistics.fmean(w["floor_over_sia"] for w in windows),
                "has_over_sia": statistics.fmean(w["has_over_sia"] for w in windows),
                "over_floor_mean": {p: statistics.fmean(w["over_floor"][p] for w in windows)
                                    for p in windows[0]["over_floor"]}}
            summary["goal_reachable_by_floor"] = summary["least_has_over_sia"] <= GOAL_VS_SIA
            table.add_row("mean", "", *("" for _ in POLICIES),
                          f"{summary['least_has_over_sia']:.3f}", f"{summary['has_over_sia']:.3f}")
            console.print(table)
            console.print("policy / floor, mean over windows: " + ", ".join(
                f"{p} {v:.2f}" for p, v in summary["over_floor_mean"].items()))
            results["settings"][name] = {"windows": windows, "summary": summary}
    Path(args.out).write_text(json.dumps(results, indent=1))
    console.print(f"saved {args.out}")


if __name__ == "__main__":
    main()
