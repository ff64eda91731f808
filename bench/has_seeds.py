"""How much the headline has / sia figures move with the seed: the benchmark's 20 windows
(bench/scheduling.py: 5 Philly windows x 2 clusters x 2 loads, the realism defaults) run
again for other seeds, has and the baselines alike.

The benchmark's figures of record use one seed (0) for the two random draws it makes: which
catalogue model each trace job becomes (`prepare_jobs(seed=)`), and each job's duration error
(`SimConfig.realistic(seed=)`, lognormal sigma 0.3). A reviewer asks whether a ratio such as
0.87x Sia is a property of the policies or of that one draw; this answers it. Seed s sets
both draws; seed 0 reproduces bench/results/scheduling.json (checked, and printed).

    .venv/bin/python bench/has_seeds.py                      # seeds 0-4, has and sia
    .venv/bin/python bench/has_seeds.py --seeds 0,1 --policies has,sia,frenzy
    .venv/bin/python bench/has_seeds.py --duration-error-sigma 0 --out /tmp/exact.json
    .venv/bin/python bench/has_seeds.py --seeds 0 --starts held-out --out bench/results/has_held_out.json

`--starts held-out` runs windows whose ratios no tuning of has measured: every 5,000th trace
job from 0 to 65,000 that is not one of the benchmark's five starts (`HELD_OUT_STARTS`). has's
settings were chosen over many sessions by their ratios on the benchmark's windows
(docs/has-experiments.md; the trace's first 10,000-15,000 jobs and the whole trace were run
too, as checks under sustained load); a gap between the two sets would be that tuning
fitted to the benchmark's windows.

Writes bench/results/has_seeds.json: per seed, setting and window, each policy's summary
metrics; and per setting the has / policy ratios as the benchmark computes them
(`summarize_cluster`: avg JCT the mean over windows of per-window ratios, p99 JCT and
GPU-hours ratios of the window means) for every seed, with their mean, min and max over
seeds. Each (seed, setting) runs in one of two worker processes (`window_runs`).
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.simulator import SimConfig
from frenzy_scheduler.simulator.trace import load_trace

from scheduling import (CLUSTERS, LOADS, PHILLY, ROOT, WINDOW_JOBS, WINDOW_STARTS,
                        summarize_cluster, window_runs)

SAVED = ROOT / "bench/results/scheduling.json"
OUT = ROOT / "bench/results/has_seeds.json"
KEYS = ("avg_jct_s", "p99_jct_s", "slowest_1pct_jct_s", "avg_queue_s", "gpu_hours",
        "restarts")  # kept per window
GOAL_VS_SIA = 0.85  # issue 9: has avg JCT <= 0.85x elastic sia's
# Every 5,000th trace job's index up to 65,000 (windows of 500 jobs stay inside the 68,063-job
# trace), less the benchmark's own starts
HELD_OUT_STARTS = tuple(i for i in range(0, 65_001, 5_000) if i not in WINDOW_STARTS)
DEFAULT_SIGMA = SimConfig.realistic().duration_error_sigma


def setting_name(cluster: str, load: float) -> str:
    return f"{cluster}/{'trace' if not load else f'load {load:g}'}"


@functools.lru_cache(maxsize=1)
def _trace() -> list:
    """One parse per worker process, not per task."""
    return load_trace(PHILLY)


def run_setting(task: tuple[int, str, float, tuple[str, ...], float, tuple[int, ...]]
                ) -> tuple[tuple, list[dict[str, Any]], float]:
    """One (seed, cluster, load, policies, error sigma, window starts)."""
    seed, cluster, load, policies, sigma, starts = task
    tick = time.process_time()
    runs = window_runs(_trace(), load_cluster_file(CLUSTERS[cluster]), starts, load,
                       list(policies), SimConfig.realistic(seed=seed, duration_error_sigma=sigma),
                       seed=seed)
    return task, runs, time.process_time() - tick


def window_starts(spec: str) -> tuple[int, ...]:
    """`--starts`: empty for the benchmark's windows, "held-out", or trace indices."""
    if not spec:
        return WINDOW_STARTS
    if spec == "held-out":
        return HELD_OUT_STARTS
    return tuple(int(s) for s in spec.split(","))


def saved_seed0(cluster: str, load: float, policy: str) -> float | None:
    """The benchmark's saved has / policy avg JCT for a setting (seed 0), if it has one."""
    if not SAVED.exists():
        return None
    saved = json.loads(SAVED.read_text())["clusters"].get(cluster, {})
    summary = saved.get("trace" if not load else f"load {load:g}", {}).get("summary", {})
    return summary.get("has_vs", {}).get(policy, {}).get("avg_jct_ratio_mean_over_windows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--policies", default="has,sia", help="has first; the others are baselines")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration-error-sigma", type=float, default=DEFAULT_SIGMA,
                        help="the realism default 0.3; 0: every policy sees exact durations")
    parser.add_argument("--starts", default="",
                        help="trace indices of the windows' first jobs, comma-separated, or "
                             "held-out (default: the benchmark's)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    starts = window_starts(args.starts)
    seeds = [int(s) for s in args.seeds.split(",")]
    policies = tuple(args.policies.split(","))
    if policies[0] != "has":
        raise SystemExit("--policies: has must come first")
    settings = [(cluster, load) for cluster in CLUSTERS for load in LOADS]
    sigma = args.duration_error_sigma
    tasks = [(seed, cluster, load, policies, sigma, starts) for seed in seeds
             for cluster, load in settings]
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {}  # seed -> setting -> windows
    cpu_s = 0.0
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        for (seed, cluster, load, _, _, _), windows, spent in pool.map(run_setting, tasks):
            cpu_s += spent
            runs.setdefault(seed, {})[setting_name(cluster, load)] = windows
    summary: dict[str, Any] = {}
    print(f"{len(tasks) * len(starts) * len(policies)} simulations, {cpu_s:.0f} s CPU, "
          f"{time.perf_counter() - started:.0f} s wall ({args.workers} workers)")
    for cluster, load in settings:
        name = setting_name(cluster, load)
        vs = {seed: summarize_cluster(runs[seed][name], list(policies))["has_vs"] for seed in seeds}
        summary[name] = {}
        for policy in policies[1:]:
            per_seed = {seed: {"avg_jct": vs[seed][policy]["avg_jct_ratio_mean_over_windows"],
                               "p99_jct": vs[seed][policy]["p99_jct_ratio"],
                               "slowest_1pct_jct": vs[seed][policy]["slowest_1pct_jct_ratio"],
                               "gpu_hours": vs[seed][policy]["gpu_hours_ratio"]} for seed in seeds}
            jct = [r["avg_jct"] for r in per_seed.values()]
            entry = summary[name][policy] = {
                "per_seed": per_seed,
                "avg_jct_mean": statistics.fmean(jct), "avg_jct_min": min(jct),
                "avg_jct_max": max(jct),
                "p99_jct_mean": statistics.fmean(r["p99_jct"] for r in per_seed.values()),
                "slowest_1pct_jct_mean": statistics.fmean(r["slowest_1pct_jct"]
                                                          for r in per_seed.values()),
                "gpu_hours_mean": statistics.fmean(r["gpu_hours"] for r in per_seed.values())}
            line = " ".join(f"s{seed} {r['avg_jct']:.3f}" for seed, r in per_seed.items())
            print(f"{name:28s} has/{policy}: avg JCT {line} | mean {entry['avg_jct_mean']:.3f} "
                  f"[{entry['avg_jct_min']:.3f}, {entry['avg_jct_max']:.3f}], p99 "
                  f"{entry['p99_jct_mean']:.3f}, GPU-h {entry['gpu_hours_mean']:.3f}")
            saved = saved_seed0(cluster, load, policy) \
                if sigma == DEFAULT_SIGMA and starts == WINDOW_STARTS else None
            if 0 in per_seed and saved is not None:
                same = abs(per_seed[0]["avg_jct"] - saved) < 1e-9
                print(f"{'':28s} seed 0 against bench/results/scheduling.json: "
                      f"{per_seed[0]['avg_jct']:.6f} vs {saved:.6f} ({'same' if same else 'DIFFERS'})")
    if "sia" in policies:
        means = [summary[setting_name(c, l)]["sia"]["avg_jct_mean"] for c, l in settings]
        met = sum(r["avg_jct"] <= GOAL_VS_SIA for c, l in settings
                  for r in summary[setting_name(c, l)]["sia"]["per_seed"].values())
        print(f"has / sia avg JCT, mean over seeds per setting: "
              f"{' / '.join(f'{m:.3f}' for m in means)}; (setting, seed) pairs at or under "
              f"{GOAL_VS_SIA}: {met} of {len(settings) * len(seeds)}")
    Path(args.out).write_text(json.dumps(
        {"seeds": seeds, "policies": list(policies), "duration_error_sigma": sigma,
         "window_starts": list(starts), "window_jobs": WINDOW_JOBS, "cpu_s": cpu_s,
         "summary": summary,
         "windows": {str(seed): {name: {str(w["start_index"]): {p: {k: w["policies"][p][k]
                                                                     for k in KEYS}
                                                                 for p in policies}
                                        for w in windows}
                                 for name, windows in by_setting.items()}
                     for seed, by_setting in runs.items()}}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
