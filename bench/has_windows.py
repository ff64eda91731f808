"""has alone on the benchmark's windows, against the saved runs of the other policies: the
development loop for a change to has (seconds per setting, where the full benchmark takes
half an hour). Every other policy is deterministic and untouched by a change to has, so its
saved windows in bench/results/scheduling.json stand; this prints has / sia (avg JCT, mean
over windows of per-window ratios; p99 and GPU-hours as ratios of the means) per setting.

    .venv/bin/python bench/has_windows.py                      # all 4 settings, 5 windows
    .venv/bin/python bench/has_windows.py --settings frenzy-288/trace --windows 5000,25000,35000
    .venv/bin/python bench/has_windows.py --set min_gain_fraction=0.1   # a HasConfig variant
    .venv/bin/python bench/has_windows.py --versus displace=0 --seeds 0,1,2    # has against has

`--versus` compares two has configurations window by window (avg JCT of --set's over the
--versus one's, mean over windows), for each seed of the duration errors: a paired check that
a change holds beyond the one draw of errors the saved sia windows were run with (seed 0).

Not a result: the figures of record come from bench/scheduling.py.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import fields, replace
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, simulate, summarize
from frenzy_scheduler.simulator.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
PHILLY = Path("/work/shared/data/traces/philly.csv")
if not PHILLY.exists():
    PHILLY = ROOT.parent / "shared/data/traces/philly.csv"
SAVED = ROOT / "bench/results/scheduling.json"
CLUSTERS = {"frenzy-288": ROOT / "deploy/clusters/frenzy-288.yaml",
            "alibaba-2026-492": ROOT / "deploy/clusters/alibaba-2026-492.yaml"}
SETTINGS = ("frenzy-288/trace", "frenzy-288/load 0.85", "alibaba-2026-492/trace",
            "alibaba-2026-492/load 0.85")


def parse_config(assignments: list[str]) -> HasConfig:
    types = {f.name: f.type for f in fields(HasConfig)}
    changes = {}
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        if name not in types:
            raise SystemExit(f"--set: unknown HasConfig field {name!r}")
        changes[name] = value in ("1", "true", "True") if types[name] in (bool, "bool") \
            else type(getattr(HasConfig(), name))(value)
    return replace(HasConfig(), **changes)


def window_arguments(description: str, cluster: str, window: int, load: float
                     ) -> argparse.ArgumentParser:
    """The arguments of a one-window diagnosis (bench/has_runtime.py, bench/has_idle.py): one of
    the benchmark's saved windows, and a has variant."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cluster", default=cluster, choices=sorted(CLUSTERS))
    parser.add_argument("--window", type=int, default=window)
    parser.add_argument("--load", type=float, default=load, help="0: the trace's arrivals")
    parser.add_argument("--set", action="append", default=[], help="HasConfig field=value")
    return parser


def saved_window_jobs(cluster: str, start_index: int, load: float) -> tuple[list, list]:
    """(node groups, jobs) of one of the benchmark's saved windows (500 jobs from the saved
    start, at the trace's rate when `load` is 0), as the benchmark prepared them (seed 0)."""
    saved = json.loads(SAVED.read_text())["clusters"][cluster]
    load_name = "trace" if not load else f"load {load:g}"
    window = next(w for w in saved[load_name]["windows"] if w["start_index"] == start_index)
    groups = load_cluster_file(CLUSTERS[cluster])
    return groups, prepare_jobs(load_trace(PHILLY), groups, start_s=window["start_s"], count=500,
                                load=load, seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--windows", default="", help="start indices (default: the saved ones)")
    parser.add_argument("--set", action="append", default=[], help="HasConfig field=value")
    parser.add_argument("--versus", action="append", default=[],
                        help="HasConfig field=value of the has to compare with, paired, instead of sia")
    parser.add_argument("--seeds", default="0", help="duration-error seeds (with --versus)")
    args = parser.parse_args()
    config = parse_config(args.set)
    if args.versus:
        return versus(config, parse_config(args.versus), [int(s) for s in args.seeds.split(",")],
                      args.settings.split(","))
    saved = json.loads(SAVED.read_text())["clusters"]
    trace = load_trace(PHILLY)
    wanted = {int(w) for w in args.windows.split(",") if w}
    for setting in args.settings.split(","):
        cluster, _, load_name = setting.partition("/")
        load = 0.0 if load_name == "trace" else float(load_name.split()[-1])
        groups = load_cluster_file(CLUSTERS[cluster])
        ratios, p99, p99_sia, gpu_h, gpu_h_sia, per_window = [], [], [], [], [], []
        tick = time.process_time()
        for window in saved[cluster][load_name]["windows"]:
            if wanted and window["start_index"] not in wanted:
                continue
            jobs = prepare_jobs(trace, groups, start_s=window["start_s"], count=500, load=load,
                                seed=0)
            ours = summarize(simulate(jobs, build_cluster(list(groups)), HasPolicy(config),
                                      config=SimConfig.realistic()))
            sia = window["policies"]["sia"]
            ratios.append(ours["avg_jct_s"] / sia["avg_jct_s"])
            per_window.append(f"{ratios[-1]:.2f}")
            p99 += [ours["p99_jct_s"]]
            p99_sia += [sia["p99_jct_s"]]
            gpu_h += [ours["gpu_hours"]]
            gpu_h_sia += [sia["gpu_hours"]]
        print(f"{setting}: has/sia avg JCT {statistics.fmean(ratios):.3f} [{', '.join(per_window)}]"
              f" p99 {statistics.fmean(p99) / statistics.fmean(p99_sia):.3f} GPU-h "
              f"{statistics.fmean(gpu_h) / statistics.fmean(gpu_h_sia):.3f} "
              f"({time.process_time() - tick:.0f} s CPU)", flush=True)


def versus(config: HasConfig, other: HasConfig, seeds: list[int], settings: list[str]) -> None:
    """Per setting and seed, has with `config` over has with `other`: the mean over windows
    of per-window avg JCT ratios (the same jobs and errors for both)."""
    saved = json.loads(SAVED.read_text())["clusters"]
    trace = load_trace(PHILLY)
    for setting in settings:
        cluster, _, load_name = setting.partition("/")
        load = 0.0 if load_name == "trace" else float(load_name.split()[-1])
        groups = load_cluster_file(CLUSTERS[cluster])
        per_seed = []
        for seed in seeds:
            sim = replace(SimConfig.realistic(), seed=seed)
            ratios = []
            for window in saved[cluster][load_name]["windows"]:
                jobs = prepare_jobs(trace, groups, start_s=window["start_s"], count=500,
                                    load=load, seed=seed)
                ours, theirs = (summarize(simulate(jobs, build_cluster(list(groups)),
                                                   HasPolicy(c), config=sim))["avg_jct_s"]
                                for c in (config, other))
                ratios.append(ours / theirs)
            per_seed.append(f"seed {seed} {statistics.fmean(ratios):.3f}")
        print(f"{setting}: has / has --versus avg JCT: {', '.join(per_seed)}", flush=True)


if __name__ == "__main__":
    main()
