"""A digest of every decision `has` makes (placements, reshapes, assignments, decision records)
over simulated Philly windows, the decision-time sweep's inputs (batch calls, and the
per-event measurement's fill and events) and optionally a prefix of the whole trace: a change
to has's mechanics (indexes, caches, bounds) must leave it byte-identical.

    .venv/bin/python bench/has_digest.py                  # windows + sweep points (~2 min)
    .venv/bin/python bench/has_digest.py --prefix 10000   # + the first 10,000 trace jobs
    .venv/bin/python bench/has_digest.py --skip windows,sweep,events --prefix 5000 --start 30000

Run it on the code before and after a change and compare the printed lines. Not a benchmark:
it prints no speed figures (see bench/scheduling.py), only digests and decision counts.
`--no-records` leaves the decision records out: for a change to what the records say, the
actions themselves must stay the same.
"""
from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, simulate
from frenzy_scheduler.simulator.trace import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scheduling import (CLUSTERS, PHILLY, SWEEP_GRID, EventState, draw_events,  # noqa: E402
                        FILL_MAX_CALLS, sweep_groups, sweep_inputs, time_events)

WINDOWS = ((5_000, 0.0), (15_000, 0.0), (5_000, 0.85), (25_000, 0.85))  # (trace index, load)
WINDOW_JOBS = 500


class Digesting:
    """has, hashing every answer it gives (the answer's repr: floats exactly). A wrapper, not
    a subclass: the compiled build's classes (frenzy_scheduler/native.py) take none."""

    def __init__(self, with_records: bool, **kwargs) -> None:
        self.with_records = with_records  # hash the decision records too, or the actions alone
        self.policy = HasPolicy(**kwargs)
        self.digest = hashlib.sha256()
        self.calls = 0
        self.actions = 0

    def __getattr__(self, name: str):  # the policy's name, round_s, elastic, ...
        return getattr(self.policy, name)

    def schedule(self, queue, cluster, now_s, running=()):
        answer = self.policy.schedule(queue, cluster, now_s, running)
        hashed = answer if self.with_records else \
            [(p.job_id, p.option, p.assignments, p.kind) for p in answer]
        self.digest.update(repr((now_s, hashed)).encode())
        self.calls += 1
        self.actions += len(answer)
        return answer


def simulated(jobs, groups, shortcuts: bool, with_records: bool = True) -> str:
    policy = Digesting(with_records, shortcuts=shortcuts)
    result = simulate(jobs, build_cluster(list(groups)), policy, config=SimConfig.realistic())
    records = [(r.job_id, r.first_start_s, r.start_time_s, r.end_time_s, r.gpu_type, r.num_gpus,
                r.restarts) for r in result.records]
    policy.digest.update(repr((records, result.reshapes)).encode())
    return f"{policy.digest.hexdigest()[:16]} ({policy.calls} decisions, {policy.actions} actions)"


def swept(queue, cluster, running, shortcuts: bool, with_records: bool = True) -> str:
    """A cold call, the same input again, then the queue losing and gaining jobs."""
    policy = Digesting(with_records, shortcuts=shortcuts)
    policy.schedule(queue, cluster, 0.0, running)
    policy.schedule(queue, cluster, 0.0, running)
    policy.schedule(queue[::2], cluster, 10.0, running)
    policy.schedule(queue[::2] + queue[1::4], cluster, 20.0, running)
    return f"{policy.digest.hexdigest()[:16]} ({policy.calls} decisions, {policy.actions} actions)"


def evented(trace, queue, cluster, running, gpus: int, queued: int, shortcuts: bool,
            with_records: bool = True) -> str:
    """The per-event measurement's calls (bench/scheduling.py `time_events`): the fill, then
    one decision after each of the point's events, every event timed."""
    policy = Digesting(with_records, shortcuts=shortcuts)
    events, top_up = draw_events(trace, queue, running, sweep_groups(gpus),
                                 random.Random(f"events:{gpus}:{queued}"),
                                 len(queue) * FILL_MAX_CALLS)
    time_events(policy, EventState.of(queue, cluster, running), events, top_up, budget_s=1e12)
    return f"{policy.digest.hexdigest()[:16]} ({policy.calls} decisions, {policy.actions} actions)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prefix", type=int, default=0, help="also the first N trace jobs")
    parser.add_argument("--start", type=int, default=0,
                        help="the trace job index --prefix starts at (the load grows later)")
    parser.add_argument("--plain", action="store_true",
                        help="HasPolicy(shortcuts=False), the straightforward path")
    parser.add_argument("--skip", default="", help="comma-separated: windows, sweep, events")
    parser.add_argument("--no-records", action="store_true",
                        help="digest the actions without their decision records")
    args = parser.parse_args()
    shortcuts, with_records = not args.plain, not args.no_records
    skip = set(filter(None, args.skip.split(",")))
    trace = load_trace(PHILLY)
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    for start, load in WINDOWS if "windows" not in skip else ():
        jobs = prepare_jobs(trace, groups, start_s=trace[start].submit_time_s,
                            count=WINDOW_JOBS, load=load, seed=0)
        digest = simulated(jobs, groups, shortcuts, with_records)
        print(f"window {start} load {load}: {digest}", flush=True)
    rng = random.Random(0)  # the sweep's own draws, point after point
    for gpus, queued in SWEEP_GRID if not {"sweep", "events"} <= skip else ():
        queue, cluster, running = sweep_inputs(trace, gpus, queued, rng)
        if "sweep" not in skip:
            digest = swept(queue, cluster, running, shortcuts, with_records)
            print(f"sweep {gpus} x {queued}: {digest}", flush=True)
        if "events" not in skip:
            digest = evented(trace, queue, cluster, running, gpus, queued, shortcuts,
                             with_records)
            print(f"events {gpus} x {queued}: {digest}", flush=True)
    if args.prefix:
        jobs = prepare_jobs(trace, groups, start_s=trace[args.start].submit_time_s,
                            count=args.prefix, seed=0)
        digest = simulated(jobs, groups, shortcuts, with_records)
        print(f"prefix {args.prefix} from {args.start}: {digest}", flush=True)


if __name__ == "__main__":
    main()
