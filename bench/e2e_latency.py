"""End-to-end latency on the demo cluster: 200 jobs through the real services and broker.

Prints p50/p99 of submit-to-placed, and of GPU-freed-to-next-job-launched (how fast the
event-driven scheduler reacts to availability), and saves them to bench/results/e2e_latency.json.
Timestamps come from the orchestrator's records (one clock).

    .venv/bin/python bench/e2e_latency.py [--jobs 200] [--policy has]
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.ports import free_port
from frenzy.tools.demo import sample_specs
from frenzy.tools.localcluster import DEFAULT_CLUSTER, start_cluster
from frenzy.v1 import types_pb2


def seconds(ts) -> float:
    return ts.ToNanoseconds() / 1e9


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    arr = np.array(values)
    return {"n": len(values), "p50_ms": round(float(np.percentile(arr, 50)) * 1e3, 2),
            "p99_ms": round(float(np.percentile(arr, 99)) * 1e3, 2),
            "mean_ms": round(float(arr.mean()) * 1e3, 2)}


def reaction_latencies(jobs: list[types_pb2.Job]) -> list[float]:
    """For each job that had to wait, time from the last GPU release before its launch to its launch."""
    finishes = sorted(seconds(j.finished_at) for j in jobs if j.finished_at.seconds)
    out = []
    for j in jobs:
        if not j.started_at.seconds or seconds(j.placed_at) - seconds(j.submitted_at) < 0.5:
            continue  # placed on arrival, not woken by a release
        launched = seconds(j.started_at)
        before = [f for f in finishes if f <= seconds(j.placed_at)]
        if before:
            out.append(launched - before[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--policy", default="has")
    parser.add_argument("--time-scale", type=float, default=0.0005)
    parser.add_argument("--out", default="bench/results/e2e_latency.json")
    args = parser.parse_args()

    rng = random.Random(7)
    specs = sample_specs()
    workdir = Path(tempfile.mkdtemp(prefix="frenzy-bench-"))
    cluster = start_cluster(DEFAULT_CLUSTER, free_port(), workdir, args.policy,
                            extra_env={"FRENZY_TIME_SCALE": str(args.time_scale)})
    started = time.monotonic()
    try:
        with FrenzyClient(cluster.grpc_address) as client:
            ids = []
            for i in range(args.jobs):
                spec = types_pb2.JobSpec()
                spec.CopyFrom(rng.choice(specs))
                spec.name = f"{spec.name}-{i}"
                ids.append(client.submit(spec))
                time.sleep(rng.expovariate(20.0))  # ~20 submissions/s
            while True:
                jobs = client.list()
                if sum(j.state in TERMINAL for j in jobs) >= len(ids) or time.monotonic() - started > 900:
                    break
                time.sleep(0.5)
    finally:
        cluster.stop()
    wall_s = time.monotonic() - started
    placed = [seconds(j.placed_at) - seconds(j.submitted_at) for j in jobs if j.placed_at.seconds]
    arrival_placed = [p for p in placed if p < 0.5]
    result = {
        "jobs": len(ids), "policy": args.policy, "wall_s": round(wall_s, 1),
        "succeeded": sum(j.state == types_pb2.SUCCEEDED for j in jobs),
        "submit_to_placed_all": percentiles(placed),
        "submit_to_placed_no_wait": percentiles(arrival_placed),
        "gpu_freed_to_next_launched": percentiles(reaction_latencies(jobs)),
    }
    print(f"e2e latency, {result['jobs']} jobs on the demo cluster ({args.policy}), "
          f"{result['succeeded']} succeeded, {wall_s:.0f}s wall")
    for key in ("submit_to_placed_no_wait", "submit_to_placed_all", "gpu_freed_to_next_launched"):
        r = result[key]
        print(f"  {key:<28} n={r.get('n', 0):<4} p50={r.get('p50_ms', '-')} ms  p99={r.get('p99_ms', '-')} ms")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
