"""How long has expected its holds to take, against how long the jobs waited: on one benchmark
window, each job's first hold for a faster type (the option it waits for and the wait
`_Pass.expected_wait_s` gives it: releases after the GPUs the jobs ahead claimed, or a
reservation's shadow), beside the wait it got (its first start minus that decision), split
by whether it started on the type it held for. Also the same estimate without the claims of
the jobs ahead, and without the reservations.

    .venv/bin/python bench/has_holds.py --cluster frenzy-288 --window 25000

A probe of the Python source (it wraps `HasPolicy._scan`, which the compiled build does not
allow), for docs/has-experiments.md (s25). Not a result: the figures of record come from
bench/scheduling.py.
"""
from __future__ import annotations

import os

os.environ["FRENZY_NATIVE"] = "0"  # before the scheduler's packages are imported

import statistics  # noqa: E402
from typing import Any  # noqa: E402

from has_windows import parse_config, saved_window_jobs, window_arguments  # noqa: E402

from frenzy_scheduler.clusterfile import build_cluster  # noqa: E402
from frenzy_scheduler.policies import has  # noqa: E402
from frenzy_scheduler.simulator import SimConfig, simulate  # noqa: E402


def first_holds(policy: has.HasPolicy, run: Any) -> dict[str, tuple[float, str, float, float, float]]:
    """job id -> (when, the type it held for, expected wait s, ... without the claims ahead
    and the reservations, ... without the reservations), at each queued job's first finite
    hold during `run()`."""
    holds: dict[str, tuple[float, str, float, float, float]] = {}
    scan = has.HasPolicy._scan

    def watched(rows: Any, facts: Any, state: Any) -> Any:
        out = scan(rows, facts, state)
        choice, value = out
        job_id = facts.job.job_id
        if choice is not None and choice[1] is None and facts.running is None and \
                value < has.INF and job_id not in holds:
            option = choice[0]
            gpu_type, gpus = option.gpu_type, option.num_gpus
            claimed, reservations = dict(state.claimed), dict(state.reservations)
            expected_s = state.expected_wait_s(gpu_type, gpus)
            state.reservations.clear()
            no_reservations_s = state.expected_wait_s(gpu_type, gpus)
            state.claimed.clear()
            bare_s = state.expected_wait_s(gpu_type, gpus)
            state.claimed.update(claimed)
            state.reservations.update(reservations)
            holds[job_id] = (state.now_s, gpu_type, expected_s, bare_s, no_reservations_s)
        return out

    has.HasPolicy._scan = staticmethod(watched)  # type: ignore[method-assign]
    try:
        run()
    finally:
        has.HasPolicy._scan = staticmethod(scan)  # type: ignore[method-assign]
    return holds


def main() -> None:
    parser = window_arguments(__doc__, "frenzy-288", 25_000, 0.0)
    args = parser.parse_args()
    groups, jobs = saved_window_jobs(args.cluster, args.window, args.load)
    policy = has.HasPolicy(parse_config(args.set))
    results = []
    holds = first_holds(policy, lambda: results.append(
        simulate(jobs, build_cluster(list(groups)), policy, config=SimConfig.realistic())))
    records = {r.job_id: r for r in results[0].records}
    print(f"{args.cluster} window {args.window} ({'trace rate' if not args.load else f'load {args.load:g}'}):"
          f" {len(jobs)} jobs, {len(holds)} held for a faster type at some point")
    split: dict[str, list[tuple[float, float, float, float]]] = {"on the type held for": [],
                                                                  "elsewhere": []}
    for job_id, (when_s, gpu_type, expected_s, bare_s, no_reservations_s) in holds.items():
        record = records[job_id]
        where = "on the type held for" if record.gpu_type == gpu_type else "elsewhere"
        split[where].append((expected_s, no_reservations_s, bare_s, record.first_start_s - when_s))
    for where, rows in split.items():
        if not rows:
            continue
        columns = list(zip(*rows))
        print(f"  started {where}: {len(rows)} jobs; wait s, median / mean:")
        for label, values in zip(("expected (claims ahead, reservations)", "expected, no reservations",
                                  "expected, no claims ahead or reservations", "got"), columns):
            print(f"    {label}: {statistics.median(values):.0f} / {statistics.fmean(values):.0f}")


if __name__ == "__main__":
    main()
