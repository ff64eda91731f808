"""The whole-trace simulation under `has`, this checkout's compiled build against another
checkout's, run after run in alternating order, each in a process of its own: the
before/after of a change to the simulator's speed (the goal: the whole Philly trace in < 60 s)
on a machine whose clock moves by 1.5x within minutes, so that a slow spell falls on both.

    .venv/bin/python -m frenzy_scheduler.native_build        # this checkout's build
    git worktree add /tmp/before <commit>
    PYTHONPATH=/tmp/before/services/scheduler .venv/bin/python -m frenzy_scheduler.native_build
    .venv/bin/python bench/has_trace_paired.py --before /tmp/before

The other checkout's packages, `frenzy` included, come from its own tree: its child process
drops the editable install's import finder, which would otherwise serve every package from
this checkout whatever PYTHONPATH says.

Each run times `run_policy` (the simulation and its summary, process CPU), as
`bench/scheduling.py --only whole-trace` does (the trace-to-MARP mapping before it is not
counted), with the engine managing the collector itself (a caller's `gc.freeze()` would
turn that off). The two builds' average JCT and decision counts must be equal, else it
stops. Prints each pair and the after /
before ratios, and appends the run to `bench/results/has_trace_paired.json` (`--out`);
`has_sim_paired.py` compares source modules in one process instead.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchio import other_checkout_env, use_other_checkout

HERE = Path(__file__).resolve().parent


def child(jobs: int) -> None:
    """One simulation; prints its CPU seconds and outcome as one JSON line."""
    use_other_checkout()  # the other checkout's packages, when this child runs them
    sys.path.insert(0, str(HERE))
    from frenzy.clusterfile import load_cluster_file
    from frenzy_scheduler import native
    from frenzy_scheduler.simulator import SimConfig, prepare_jobs, run_policy
    from frenzy_scheduler.simulator.trace import load_trace
    from scheduling import CLUSTERS, PHILLY

    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    sim_jobs = prepare_jobs(load_trace(PHILLY), groups, seed=0)[:jobs]
    tick = time.process_time()
    metrics = run_policy("has", sim_jobs, groups, config=SimConfig.realistic())
    print(json.dumps({"cpu_s": time.process_time() - tick, "avg_jct_s": metrics["avg_jct_s"],
                      "decisions": metrics["decisions"], "build": native.build_name()}))


def run(checkout: Path | None, jobs: int) -> dict:
    """One child process: this checkout's install (None), or another checkout's tree."""
    env = other_checkout_env(checkout) if checkout is not None else dict(os.environ)
    out = subprocess.run([sys.executable, __file__, "--child", str(jobs)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the other checkout, e.g. a worktree (required)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=10**6, help="the first N trace jobs (all)")
    parser.add_argument("--label", default="", help="saved with the run")
    parser.add_argument("--out", default=str(HERE / "results" / "has_trace_paired.json"),
                        help="JSON file the run is appended to (key 'runs'; '' : none)")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if not args.before:
        parser.error("--before is required")
    sys.path.insert(0, str(HERE))
    from has_decision_time import append_run, loadavg

    started = time.gmtime()
    before = Path(args.before).resolve()
    ratios, pairs, load_start = [], [], loadavg()
    for turn in range(args.pairs):
        order = ("before", "after") if turn % 2 == 0 else ("after", "before")
        got = {name: run(before if name == "before" else None, args.jobs) for name in order}
        if (got["before"]["avg_jct_s"], got["before"]["decisions"]) != \
                (got["after"]["avg_jct_s"], got["after"]["decisions"]):
            raise SystemExit(f"pair {turn}: the two builds' simulations differ: {got}")
        ratios.append(got["after"]["cpu_s"] / got["before"]["cpu_s"])
        pairs.append({"order": list(order), **got, "after_over_before_cpu": ratios[-1]})
        print(f"pair {turn} ({' then '.join(order)}): before {got['before']['cpu_s']:.1f} s CPU "
              f"({got['before']['build']}), after {got['after']['cpu_s']:.1f} s "
              f"({got['after']['build']}), ratio {ratios[-1]:.3f}; "
              f"{got['after']['decisions']} decisions, avg JCT {got['after']['avg_jct_s']:.0f} s",
              flush=True)
    print(f"after / before CPU: {', '.join(f'{r:.3f}' for r in ratios)}")
    append_run(args.out, {"label": args.label, "before": args.before, "jobs": args.jobs,
                          "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", started),
                          "load_start": load_start, "load_end": loadavg(), "pairs": pairs})


if __name__ == "__main__":
    main()
