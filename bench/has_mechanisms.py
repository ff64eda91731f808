"""Which of has's elastic mechanisms costs what under sustained load: has on a prefix of the
Philly trace (frenzy-288, trace arrivals, realism defaults) with each mechanism on and off,
printing avg JCT split into queueing and run time, restarts, reshapes by kind, restarts per
job, and the long jobs' (fastest option > 5 h) JCT. The diagnosis of the whole-trace
regression in docs/has.md ("Under sustained load").

    .venv/bin/python bench/has_mechanisms.py --jobs 20000 [--variants default,no-start-now]

Minutes, not the whole trace's 20: the first 10,000-20,000 jobs already show the regression.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, simulate
from frenzy_scheduler.simulator.trace import load_trace
from has_windows import parse_config

ROOT = Path(__file__).resolve().parents[1]
PHILLY = Path("/work/shared/data/traces/philly.csv")
if not PHILLY.exists():
    PHILLY = ROOT.parent / "shared/data/traces/philly.csv"
LONG_S = 5 * 3600.0  # a "long" job: its fastest option runs longer than this
VARIANTS = {
    "default": HasConfig(),
    "no-admission": HasConfig(shrink_after_s=math.inf),  # no admission by shrinking
    "no-start-now": HasConfig(start_now=False),
    "no-displace": HasConfig(displace=False),  # admission by shrinking only (before i9jct)
    "no-grow-per-gpu": HasConfig(grow_per_gpu=False),
    "none-of-the-three": HasConfig(shrink_after_s=math.inf, start_now=False, grow_per_gpu=False),
    "non-elastic": HasConfig(elastic=False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0, help="trace job index of the first job")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seed", type=int, default=0, help="of the duration errors")
    parser.add_argument("--set", action="append", default=[],
                        help="HasConfig field=value: adds the variant 'set' (default with these)")
    args = parser.parse_args()
    variants = dict(VARIANTS)
    if args.set:
        variants["set"] = parse_config(args.set)
    trace = load_trace(PHILLY)
    groups = load_cluster_file(ROOT / "deploy/clusters/frenzy-288.yaml")
    jobs = prepare_jobs(trace, groups, start_s=trace[args.start].submit_time_s, count=args.jobs,
                        seed=args.seed)
    fastest_s = {j.job_id: min((o.duration_s for o in j.options), default=0.0) for j in jobs}
    for name in args.variants.split(","):
        tick = time.process_time()
        result = simulate(jobs, build_cluster(list(groups)), HasPolicy(variants[name]),
                          config=replace(SimConfig.realistic(), seed=args.seed))
        done = [r for r in result.records if not math.isnan(r.end_time_s)]
        jct_h = [(r.end_time_s - r.submit_time_s) / 3600 for r in done]
        queue_h = [(r.first_start_s - r.submit_time_s) / 3600 for r in done]
        per_job = sorted(r.restarts for r in result.records)
        long_h = [(r.end_time_s - r.submit_time_s) / 3600 for r in done
                  if fastest_s[r.job_id] > LONG_S]
        print(f"{name}: avg JCT {statistics.mean(jct_h):.2f} h (queue {statistics.mean(queue_h):.2f}"
              f" h + run {statistics.mean(jct_h) - statistics.mean(queue_h):.2f} h), restarts "
              f"{result.restarts}, reshapes {dict(result.reshapes)}, restarts per job p99 "
              f"{per_job[int(0.99 * len(per_job))]} max {per_job[-1]}, long jobs "
              f"{len(long_h)} avg JCT {statistics.mean(long_h) if long_h else 0.0:.1f} h, "
              f"GPU-h {sum(result.busy_gpu_s_by_type.values()) / 3600:.0f}, stranded "
              f"{len(result.stranded)} ({time.process_time() - tick:.0f} s CPU)", flush=True)


if __name__ == "__main__":
    main()
