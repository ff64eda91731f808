"""has's decision time at chosen sweep points, batch and per event, with the sweep's own inputs
and harness (bench/scheduling.py `time_decisions` and `time_events`), has alone: the quick
before/after comparison of a performance round, not the figures of record (those come from
`bench/scheduling.py --only sweep`, every policy).

    .venv/bin/python bench/has_decision_time.py --label after --out bench/results/x.json
    # the same file run against another checkout's code (its own venv, from its root):
    cd /work/main && .venv/bin/python /work/wt/perf7/bench/has_decision_time.py --label main ...

Each run appends one record (label, commit, load averages before and after, and per point
the batch and per-event CPU and wall p50 / p99) to the JSON file's "runs" list, so runs of
two checkouts interleaved (A B A B) land side by side.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from frenzy_scheduler import native
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator.trace import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scheduling import (EVENT_BUDGET_S, FILL_MAX_CALLS, PHILLY, SWEEP_BUDGET_S,  # noqa: E402
                        SWEEP_GRID, EventState, draw_events, sweep_groups, sweep_inputs,
                        time_decisions, time_events)


def load_module(name: str, path: Path):
    """Another checkout's module file loaded under `name` beside this checkout's (its imports
    resolve here): the "before" side of the paired benchmarks."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def wanted_sweep_inputs(trace: list, points: str):
    """(gpus, queued, queue, cluster, running) for each of `points` ("GPUsxqueued,...") in the
    sweep's grid, drawn as the sweep draws them: every point in turn from one seeded stream, so
    a point's inputs are the sweep's whichever others are asked for."""
    wanted = {tuple(int(x) for x in p.split("x")) for p in points.split(",") if p}
    rng = random.Random(0)  # the sweep's own draws, point after point
    for gpus, queued in SWEEP_GRID:
        queue, cluster, running = sweep_inputs(trace, gpus, queued, rng)
        if (gpus, queued) in wanted:
            yield gpus, queued, queue, cluster, running


def append_run(out: str, run: dict, key: str = "runs") -> None:
    """Add one run to the list `key` of the JSON file `out` (nothing when `out` is empty), so
    that interleaved runs of two checkouts land in one file."""
    if out:
        path = Path(out)
        saved = json.loads(path.read_text()) if path.exists() else {}
        saved.setdefault(key, []).append(run)
        path.write_text(json.dumps(saved, indent=1) + "\n")


def point_times(trace: list, gpus: int, queued: int, queue, cluster, running, batch_s: float,
                events: bool) -> dict:
    result: dict = {"gpus": sum(n.total_gpus for n in cluster.nodes.values()), "queued": queued}
    if batch_s > 0:
        result["batch"] = time_decisions(HasPolicy(), queue, cluster, running, batch_s)
    if events:
        drawn, top_up = draw_events(trace, queue, running, sweep_groups(gpus),
                                    random.Random(f"events:{gpus}:{queued}"),
                                    len(queue) * FILL_MAX_CALLS)
        timing = time_events(HasPolicy(), EventState.of(queue, cluster, running), drawn, top_up,
                             EVENT_BUDGET_S * 1000)  # every event timed, as has is in the sweep
        timing.pop("events")
        result["per_event"] = timing
    for kind in ("batch", "per_event"):
        if kind in result:
            t = result[kind]
            print(f"{gpus} x {queued} {kind}: CPU {t['cpu_p50_s'] * 1e3:.2f} / "
                  f"{t['cpu_p99_s'] * 1e3:.2f} ms, wall {t['p50_s'] * 1e3:.2f} / "
                  f"{t['p99_s'] * 1e3:.2f} ms ({t['samples']} calls)"
                  + (f"; reading the records {t['records_read_cpu_s'] * 1e3:.2f} ms CPU"
                     if "records_read_cpu_s" in t else ""), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", default="10000x5000",
                        help="comma-separated GPUsxqueued, from the sweep's grid")
    parser.add_argument("--batch-s", type=float, default=SWEEP_BUDGET_S,
                        help="batch calls' time budget per point (0: no batch measurement)")
    parser.add_argument("--no-events", action="store_true")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    # The commit of the checkout whose scheduler this process imported (the code timed), not
    # of the directory it was started from: a run against another checkout's code starts here
    code_dir = Path(native.__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=code_dir).stdout.strip()
    trace = load_trace(PHILLY)
    run: dict = {"label": args.label, "commit": commit, "cwd": os.getcwd(),
                 "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "loadavg_before": loadavg(), "points": [],
                 # the build that decided: the mypyc-compiled modules, or none (the Python source)
                 "compiled": native.compiled_modules()}
    for gpus, queued, queue, cluster, running in wanted_sweep_inputs(trace, args.points):
        run["points"].append(point_times(trace, gpus, queued, queue, cluster, running,
                                         args.batch_s, not args.no_events))
    run["loadavg_after"] = loadavg()
    print(f"{args.label} ({commit}, {native.build_name()}): load {run['loadavg_before']} -> "
          f"{run['loadavg_after']}")
    append_run(args.out, run)


if __name__ == "__main__":
    main()
