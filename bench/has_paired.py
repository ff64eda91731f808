"""has against another checkout's has, in one process, call by call: a before/after comparison
of decision time that the machine's drift cannot bias (on 2 shared cores, whole runs of the
same code differ by up to 2x in CPU time minutes apart; here both versions decide the same
input back to back, in alternating order, so each pair meets the same conditions).

    .venv/bin/python bench/has_paired.py --before /work/main/services/scheduler/frenzy_scheduler/policies/has.py

The other `has.py` is loaded as a module of its own, importing this checkout's other modules
(placement, elastic, releases: give it a `has.py` whose imports exist here). Per sweep point
(the sweep's inputs and events, bench/scheduling.py): batch, `--batch-calls` calls of each on
the point's input; per event, the fill and one decision after each of the 100 events, both
versions deciding each (the answers must be equal, else it stops) and the state advanced by
the answer once. Prints and saves (--out, appended to "paired") CPU and wall p50 / p99 of
each, and the median over calls of after / before CPU time.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import sys
import time
from pathlib import Path

from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator.trace import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from has_decision_time import append_run, load_module, loadavg, wanted_sweep_inputs  # noqa: E402
from scheduling import (FILL_MAX_CALLS, PHILLY, EventState, draw_events,  # noqa: E402
                        percentile, sweep_groups)


def timed(policy, queue, cluster, now_s, running) -> tuple[list, float, float]:
    gc.collect()
    tick, tick_cpu = time.perf_counter(), time.process_time()
    answer = policy.schedule(queue, cluster, now_s, running)
    return answer, time.perf_counter() - tick, time.process_time() - tick_cpu


def summary(samples: dict[str, list[tuple[float, float]]]) -> dict:
    out: dict = {}
    for name, calls in samples.items():
        wall, cpu = sorted(w for w, _ in calls), sorted(c for _, c in calls)
        out[name] = {"cpu_p50_s": percentile(cpu, 0.5), "cpu_p99_s": percentile(cpu, 0.99),
                     "p50_s": percentile(wall, 0.5), "p99_s": percentile(wall, 0.99),
                     "calls": len(calls)}
    out["after_over_before_cpu_median"] = statistics.median(
        a[1] / b[1] for a, b in zip(samples["after"], samples["before"]))
    return out


def pair(policies: dict, queue, cluster, now_s, running, samples, turn: int) -> list:
    """Both versions decide the same input, in an order that alternates with `turn`."""
    answers = {}
    for name in (("before", "after") if turn % 2 else ("after", "before")):
        answers[name], wall, cpu = timed(policies[name], queue, cluster, now_s, running)
        samples[name].append((wall, cpu))
    if answers["before"] != answers["after"]:
        raise SystemExit(f"the two versions answered differently at t={now_s}")
    return answers["after"]


def paired_point(trace, gpus, queued, queue, cluster, running, before: type,
                 batch_calls: int) -> dict:
    result: dict = {"gpus": sum(n.total_gpus for n in cluster.nodes.values()), "queued": queued}
    gc.collect()
    gc.freeze()
    try:
        policies = {"before": before(), "after": HasPolicy()}
        samples: dict = {"before": [], "after": []}
        for turn in range(batch_calls + 1):
            pair(policies, queue, cluster, 0.0, running, samples, turn)
        samples = {name: calls[1:] for name, calls in samples.items()}  # the cold calls apart
        result["batch"] = summary(samples)
    finally:
        gc.unfreeze()
    events, top_up = draw_events(trace, queue, running, sweep_groups(gpus),
                                 random.Random(f"events:{gpus}:{queued}"),
                                 len(queue) * FILL_MAX_CALLS)
    state = EventState.of(queue, cluster, running)
    policies = {"before": before(), "after": HasPolicy()}
    spare, length = iter(top_up), len(state.queue)
    for turn in range(FILL_MAX_CALLS):  # the fill, as time_events does it
        answer = pair(policies, list(state.queue.values()), state.cluster, 0.0,
                      list(state.running.values()), {"before": [], "after": []}, turn)
        placed = state.apply(answer, 0.0)
        for job in itertools.islice(spare, max(0, length - len(state.queue))):
            state.enqueue(job)
        if not placed:
            break
    samples = {"before": [], "after": []}
    gc.collect()
    gc.freeze()
    try:
        for turn, event in enumerate(events):
            state.happen(event)
            answer = pair(policies, list(state.queue.values()), state.cluster, event.time_s,
                          list(state.running.values()), samples, turn)
            state.apply(answer, event.time_s)
    finally:
        gc.unfreeze()
    result["per_event"] = summary(samples)
    for kind in ("batch", "per_event"):
        t = result[kind]
        print(f"{gpus} x {queued} {kind}: before CPU {t['before']['cpu_p50_s'] * 1e3:.2f} / "
              f"{t['before']['cpu_p99_s'] * 1e3:.2f} ms wall {t['before']['p50_s'] * 1e3:.2f} / "
              f"{t['before']['p99_s'] * 1e3:.2f}; after CPU {t['after']['cpu_p50_s'] * 1e3:.2f} / "
              f"{t['after']['cpu_p99_s'] * 1e3:.2f} ms wall {t['after']['p50_s'] * 1e3:.2f} / "
              f"{t['after']['p99_s'] * 1e3:.2f}; after / before CPU, median of pairs "
              f"{t['after_over_before_cpu_median']:.3f}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True, help="the other checkout's has.py")
    parser.add_argument("--points", default="10000x5000")
    parser.add_argument("--batch-calls", type=int, default=30)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    before = load_module("has_before", Path(args.before)).HasPolicy
    trace = load_trace(PHILLY)
    run: dict = {"label": args.label, "before": args.before,
                 "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "loadavg_before": loadavg(), "points": []}
    for gpus, queued, queue, cluster, running in wanted_sweep_inputs(trace, args.points):
        run["points"].append(paired_point(trace, gpus, queued, queue, cluster, running,
                                          before, args.batch_calls))
    run["loadavg_after"] = loadavg()
    print(f"load {run['loadavg_before']} -> {run['loadavg_after']}")
    append_run(args.out, run, "paired")


if __name__ == "__main__":
    main()
