"""has beside elastic Sia on the Philly trace's first N jobs, at the trace's own arrivals: the
sustained-load check that the benchmark's 500-job windows cannot give.

The whole trace runs under has alone (bench/scheduling.py, `--only whole-trace`), because Sia's
60 s round re-solves every active job and would take hours here. A prefix is the longest run
both policies can share: the trace's first 2,000 jobs span 25 days at a low average load, with
bursts of hundreds of short jobs; jobs 2,000-10,000 arrive within the next 14 days, and the
queue builds (has's average queueing on the first 10,000 jobs is 2.5 h).

    .venv/bin/python bench/has_prefix.py                         # 2,000 jobs, seed 0 (~6 min)
    .venv/bin/python bench/has_prefix.py --jobs 10000            # about an hour, most of it Sia's
    .venv/bin/python bench/has_prefix.py --policies has --jobs 10000 --seeds 0,1,2

frenzy-288, the realism defaults (`SimConfig.realistic`, 60 s launches, restarts, duration
errors), the same seed for the trace-to-model mapping and the errors, as bench/has_seeds.py.
Prints each policy's figures and has / sia per seed, and merges them into
bench/results/has_prefix.json (keyed by jobs, seed and policy, so a run of one policy keeps
the others' saved runs). Not a speed figure: the CPU seconds are printed for scale only.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, run_policy
from frenzy_scheduler.simulator.trace import load_trace

from scheduling import CLUSTERS, CURVE_KEYS, PHILLY, ROOT

OUT = ROOT / "bench/results/has_prefix.json"
KEYS = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s", "gpu_hours",
        "restarts", "utilization")


def run(policy: str, sim_jobs: list, groups: list, seed: int) -> dict[str, Any]:
    """One policy on the prepared jobs; its summary, without the curves."""
    tick = time.process_time()
    metrics = run_policy(policy, sim_jobs, groups, config=SimConfig.realistic(seed=seed))
    for key in CURVE_KEYS:
        metrics.pop(key, None)
    metrics["cpu_s"] = time.process_time() - tick
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--policies", default="has,sia")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    out = Path(args.out)
    saved: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    trace = load_trace(PHILLY)
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    for seed in (int(s) for s in args.seeds.split(",")):
        runs = saved.setdefault(f"{args.jobs} jobs", {}).setdefault(f"seed {seed}", {})
        # mapped once per seed for every policy, and only the prefix (checked: the same jobs as
        # the whole trace's mapping cut to it, at seeds 0 and 1)
        sim_jobs = prepare_jobs(trace, groups, count=args.jobs, seed=seed)
        for policy in args.policies.split(","):
            runs[policy] = run(policy, sim_jobs, groups, seed)
            figures = ", ".join(f"{key} {runs[policy][key]:.0f}" for key in KEYS[:-1])
            print(f"{args.jobs} jobs, seed {seed}, {policy}: {figures} "
                  f"({runs[policy]['cpu_s']:.0f} s CPU)", flush=True)
            out.write_text(json.dumps(saved, indent=1))  # a long run keeps what it has done
        if "has" in runs and "sia" in runs:
            ratios = {key: runs["has"][key] / runs["sia"][key] for key in KEYS
                      if runs["sia"][key]}
            runs["has / sia"] = ratios
            print(f"{args.jobs} jobs, seed {seed}, has / sia: " +
                  ", ".join(f"{key} {value:.3f}" for key, value in ratios.items()))
            out.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
