"""What the cyclic garbage collector does during a simulation of the Philly trace under `has`
on frenzy-288 (realism defaults): its passes per generation, their CPU seconds, and how many
objects they collected, from `gc.callbacks`.

    .venv/bin/python bench/sim_collector.py                 # the whole trace, the engine's own collections
    .venv/bin/python bench/sim_collector.py --automatic     # the collector left on for the run

By default the engine turns automatic collection off for the run and collects at doubling gaps
(`simulator.engine._RunCollector`). `--automatic` freezes the inputs here, as the engine does,
so that the engine leaves the collector alone and it runs by allocation counts, as before the
ninth round (docs/has-performance.md): its `collected` counts say whether the run leaves any
reference cycles behind. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from frenzy.clusterfile import load_cluster_file
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, run_policy
from frenzy_scheduler.simulator.trace import load_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from has_decision_time import loadavg  # noqa: E402
from scheduling import CLUSTERS, PHILLY  # noqa: E402


class GcCensus:
    """Passes, CPU seconds and objects collected per generation."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.cpu_s = [0.0, 0.0, 0.0]
        self.collected = [0, 0, 0]
        self._start_s = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start_s = time.process_time()
            return
        generation = info["generation"]
        self.passes[generation] += 1
        self.cpu_s[generation] += time.process_time() - self._start_s
        self.collected[generation] += info["collected"]

    @property
    def total_s(self) -> float:
        return sum(self.cpu_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=0, help="the first N trace jobs (0: all)")
    parser.add_argument("--automatic", action="store_true",
                        help="leave the collector on for the run (inputs frozen here)")
    args = parser.parse_args()
    trace = load_trace(PHILLY)
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    window = {"start_s": trace[0].submit_time_s, "count": args.jobs} if args.jobs else {}
    jobs = prepare_jobs(trace, groups, seed=0, **window)  # all: as scheduling.py's whole trace
    if args.automatic:
        gc.collect()
        gc.freeze()
    census = GcCensus()
    load_start = loadavg()
    tick_cpu = time.process_time()
    metrics = run_policy("has", jobs, groups, config=SimConfig.realistic())
    cpu_s = time.process_time() - tick_cpu
    print(json.dumps({"jobs": len(jobs), "automatic": args.automatic, "sim_cpu_s": round(cpu_s, 2),
                      "gc_passes": census.passes, "gc_cpu_s": [round(s, 2) for s in census.cpu_s],
                      "gc_collected": census.collected, "decisions": metrics["decisions"],
                      "load": [load_start, loadavg()]}))


if __name__ == "__main__":
    main()
