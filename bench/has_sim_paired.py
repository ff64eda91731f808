"""The simulator over the first N Philly trace jobs under `has`, this checkout against another
checkout's simulator engine and `has`, in one process, run after run in alternating order: a
before/after comparison of the whole simulation's CPU time that the shared machine's drift
cannot bias (what `has_paired.py` does per call, here per simulation).

    .venv/bin/python bench/has_sim_paired.py --before-root /tmp/main --jobs 8000 --pairs 4

`--before-root` is a checkout (or a `git archive` of one): its `has.py` and simulator
`engine.py` are loaded as modules of their own, importing this checkout's other modules (give
it files whose imports exist here). Each run's records and reshape counts must be equal, else
it stops. Prints and appends (--out, under "sim_paired") each pair's CPU seconds, the garbage
collector's share of them (gc.callbacks), and the after / before ratio.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator import SimConfig, prepare_jobs
from frenzy_scheduler.simulator.engine import simulate
from frenzy_scheduler.simulator.trace import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from has_decision_time import append_run, load_module, loadavg  # noqa: E402
from scheduling import CLUSTERS, PHILLY  # noqa: E402
from sim_collector import GcCensus  # noqa: E402

HAS_PATH = "services/scheduler/frenzy_scheduler/policies/has.py"
ENGINE_PATH = "services/scheduler/frenzy_scheduler/simulator/engine.py"


def run(simulate_fn, policy_cls, jobs, groups, clock: GcCensus) -> tuple[float, float, tuple]:
    gc.collect()
    gc_before_s = clock.total_s
    tick_cpu = time.process_time()
    result = simulate_fn(jobs, build_cluster(list(groups)), policy_cls(),
                         config=SimConfig.realistic())
    cpu_s = time.process_time() - tick_cpu
    outcome = ([(r.job_id, r.first_start_s, r.start_time_s, r.end_time_s, r.gpu_type,
                 r.num_gpus, r.restarts) for r in result.records], result.reshapes,
               len(result.decision_times_s))
    return cpu_s, clock.total_s - gc_before_s, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before-root", required=True)
    parser.add_argument("--jobs", type=int, default=8000, help="the first N trace jobs")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    root = Path(args.before_root)
    versions = {
        "before": (load_module("engine_before", root / ENGINE_PATH).simulate,
                   load_module("has_before", root / HAS_PATH).HasPolicy),
        "after": (simulate, HasPolicy),
    }
    trace = load_trace(PHILLY)
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    jobs = prepare_jobs(trace, groups, start_s=trace[0].submit_time_s, count=args.jobs, seed=0)
    clock = GcCensus()
    pairs = []
    load_start = loadavg()
    for turn in range(args.pairs):
        measured, outcomes = {}, {}
        for name in (("before", "after") if turn % 2 == 0 else ("after", "before")):
            cpu_s, gc_s, outcomes[name] = run(*versions[name], jobs, groups, clock)
            measured[name] = {"cpu_s": cpu_s, "gc_cpu_s": gc_s}
        if outcomes["before"] != outcomes["after"]:
            raise SystemExit(f"pair {turn}: the two versions' simulations differ")
        measured["after_over_before_cpu"] = measured["after"]["cpu_s"] / measured["before"]["cpu_s"]
        pairs.append(measured)
        print(f"pair {turn}: before {measured['before']['cpu_s']:.2f} s CPU "
              f"(gc {measured['before']['gc_cpu_s']:.2f}), after {measured['after']['cpu_s']:.2f} "
              f"s (gc {measured['after']['gc_cpu_s']:.2f}), ratio "
              f"{measured['after_over_before_cpu']:.3f}", flush=True)
    ratios = [p["after_over_before_cpu"] for p in pairs]
    summary = {"label": args.label, "jobs": args.jobs, "before_root": str(root),
               "decisions": outcomes["after"][2],
               "load_start": load_start, "load_end": loadavg(), "pairs": pairs,
               "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)]}
    print(f"ratio median {summary['ratio_median']:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}; "
          f"load {load_start} -> {summary['load_end']}")
    if args.out:
        append_run(args.out, summary, "sim_paired")


if __name__ == "__main__":
    main()
