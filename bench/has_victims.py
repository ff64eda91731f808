"""Where has's JCT goes against elastic Sia's on one benchmark window: each job's JCT under has
minus under sia, summed by what has did to it (placed or admitted by shrinking; then shrunk or
displaced for a later newcomer, or not; grown or migrated into GPUs no queued job wanted, or
not), with the queueing totals.
The diagnosis in docs/has.md ("Where has loses"), reproduced in seconds: sia takes about 20 s
of CPU on a window, has under one.

    .venv/bin/python bench/has_victims.py --window 35000
    .venv/bin/python bench/has_victims.py --window 35000 --set displace=0   # a HasConfig variant

Not a result: the figures of record come from bench/scheduling.py.
"""
from __future__ import annotations

import argparse
import collections
import math
import time

from has_windows import CLUSTERS, parse_config, saved_window_jobs

from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.core import PLACE
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator import SimConfig, simulate


class Recorder:
    """A policy wrapper that keeps, per job, the kind of each action has took on it (the
    decision record's reason says whether a placement or a resize was admission's)."""

    def __init__(self, policy: HasPolicy) -> None:
        self.policy, self.name, self.round_s = policy, policy.name, policy.round_s
        # The simulator asks an elastic policy to decide with an empty queue too (growth);
        # without this the wrapped has never grew a job while nothing waited
        self.elastic = policy.elastic
        self.history: dict[str, list[str]] = collections.defaultdict(list)

    def schedule(self, queue, cluster, now_s, running=()):
        actions = self.policy.schedule(queue, cluster, now_s, running)
        before = {r.job_id: r for r in running}
        for action in actions:
            reason = action.decision.reason if action.decision else ""
            if action.kind == PLACE:
                kind = "admitted" if "admitted by shrinking" in reason else "placed"
            elif "to admit" in reason:
                kind = "shrunk" if action.option.gpu_type == before[action.job_id].option.gpu_type \
                    else "displaced"
            else:
                kind = "grown"  # growth or migration onto GPUs no queued job wants
            self.history[action.job_id].append(kind)
        return actions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", default="frenzy-288", choices=sorted(CLUSTERS))
    parser.add_argument("--window", type=int, default=35_000, help="a saved window's start index")
    parser.add_argument("--load", type=float, default=0.0, help="0: the trace's arrivals")
    parser.add_argument("--set", action="append", default=[], help="HasConfig field=value")
    args = parser.parse_args()
    groups, jobs = saved_window_jobs(args.cluster, args.window, args.load)
    recorder = Recorder(HasPolicy(parse_config(args.set)))
    runs = {}
    for name, policy in (("sia", get_policy("sia")), ("has", recorder)):
        tick = time.process_time()
        result = simulate(jobs, build_cluster(list(groups)), policy, config=SimConfig.realistic())
        runs[name] = ({r.job_id: r for r in result.records}, result.restarts)
        print(f"{name}: {time.process_time() - tick:.1f} s CPU, {result.restarts} restarts")
    history = recorder.history
    sia, has = runs["sia"][0], runs["has"][0]

    def hours(records, job_id, start=False):
        r = records[job_id]
        end = r.first_start_s if start else r.end_time_s
        return (end - r.submit_time_s) / 3600 if not math.isnan(end) else math.nan

    total = {n: sum(hours(recs, j) for j in recs) for n, recs in (("has", has), ("sia", sia))}
    queued = {n: sum(hours(recs, j, True) for j in recs) for n, recs in (("has", has), ("sia", sia))}
    print(f"JCT summed over jobs: has {total['has']:.1f} h (queueing {queued['has']:.1f} h), "
          f"sia {total['sia']:.1f} h (queueing {queued['sia']:.1f} h); gap "
          f"{total['has'] - total['sia']:+.1f} h")
    by_group = collections.defaultdict(lambda: [0, 0.0])  # group -> [jobs, JCT gap in hours]
    for job_id in has:
        kinds = history[job_id]
        group = ("admitted by shrinking" if kinds and kinds[0] == "admitted" else "placed") + \
            (", then shrunk or displaced" if {"shrunk", "displaced"} & set(kinds) else "") + \
            (", grown" if "grown" in kinds else "")
        by_group[group][0] += 1
        by_group[group][1] += hours(has, job_id) - hours(sia, job_id)
    for group, (count, gap_h) in sorted(by_group.items(), key=lambda g: -g[1][1]):
        print(f"  {group}: {count} jobs, JCT has - sia {gap_h:+.1f} h")


if __name__ == "__main__":
    main()
