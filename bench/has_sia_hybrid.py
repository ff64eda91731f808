"""An experiment, not a policy: `has`, with Sia's own round solve (policies/sia.py) taking the
decisions at which `--queued` or more jobs wait. It asks whether a re-solve of every running
job's width at once, which the earlier rounds named as what a burst needs
(docs/has-experiments.md, s14), closes `has`'s gap to Sia at the trace's rate.

    .venv/bin/python bench/has_sia_hybrid.py --queued 8            # the four settings
    .venv/bin/python bench/has_sia_hybrid.py --queued 1 --settings frenzy-288/trace   # Sia per event

Prints, per setting, the hybrid's average JCT over Sia's saved windows (the mean of per-window
ratios, as bench/has_windows.py prints has's), and how many decisions Sia's solve took. The
solve is a MILP: a decision that runs it takes Sia's time, not has's, so the hybrid does not meet
has's decision-time goal and is not offered as a policy. Results: docs/has-experiments.md, s15.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from has_windows import CLUSTERS, PHILLY, SAVED, SETTINGS  # noqa: E402

from frenzy.clusterfile import load_cluster_file  # noqa: E402
from frenzy_scheduler.clusterfile import build_cluster  # noqa: E402
from frenzy_scheduler.core import ClusterView, Placement, QueuedJob, RunningJob  # noqa: E402
from frenzy_scheduler.policies.has import HasPolicy  # noqa: E402
from frenzy_scheduler.policies.sia import SiaConfig, SiaPolicy  # noqa: E402
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, simulate, summarize  # noqa: E402
from frenzy_scheduler.simulator.trace import load_trace  # noqa: E402


class HasWithSiaBursts:
    """has's decision, except where `queued` or more jobs wait: there Sia's solve re-plans every
    queued and running job at once (its actions: place, resize, migrate, preempt)."""

    name = "has"
    elastic = True
    round_s = 0.0  # event-driven, as has: the solve runs at the engine's decisions

    def __init__(self, queued: int) -> None:
        self.queued = queued
        self.has = HasPolicy()
        self.sia = SiaPolicy(SiaConfig(reuse_unchanged_round=False))
        self.solves = 0

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        if len(queue) >= self.queued:
            self.solves += 1
            return self.sia.schedule(queue, cluster, now_s, running)
        return self.has.schedule(queue, cluster, now_s, running)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", type=int, default=8,
                        help="Sia's solve decides when at least this many jobs wait")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    args = parser.parse_args()
    if args.queued < 1:
        parser.error("--queued: at least 1")
    saved = json.loads(SAVED.read_text())["clusters"]
    trace = load_trace(PHILLY)
    for setting in args.settings.split(","):
        cluster, _, load_name = setting.partition("/")
        if cluster not in CLUSTERS or load_name not in saved[cluster]:
            parser.error(f"--settings: unknown setting {setting!r} (known: {', '.join(SETTINGS)})")
        load = 0.0 if load_name == "trace" else float(load_name.split()[-1])
        groups = load_cluster_file(CLUSTERS[cluster])
        ratios, solves, restarts, gpu_h, gpu_h_sia = [], [], [], [], []
        for window in saved[cluster][load_name]["windows"]:
            jobs = prepare_jobs(trace, groups, start_s=window["start_s"], count=500, load=load,
                                seed=0)
            policy = HasWithSiaBursts(args.queued)
            ours = summarize(simulate(jobs, build_cluster(list(groups)), policy,
                                      config=SimConfig.realistic()))
            sia = window["policies"]["sia"]
            ratios.append(ours["avg_jct_s"] / sia["avg_jct_s"])
            solves.append(policy.solves)
            restarts.append(ours["restarts"])
            gpu_h.append(ours["gpu_hours"])
            gpu_h_sia.append(sia["gpu_hours"])
        print(f"{setting}: hybrid (Sia's solve at >= {args.queued} queued) / sia avg JCT "
              f"{statistics.fmean(ratios):.3f} [{', '.join(f'{r:.2f}' for r in ratios)}] "
              f"GPU-h {statistics.fmean(gpu_h) / statistics.fmean(gpu_h_sia):.3f}; "
              f"Sia's solves per window {solves}, restarts {restarts}", flush=True)


if __name__ == "__main__":
    main()
