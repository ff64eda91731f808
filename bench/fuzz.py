"""The long fuzz: 5,000 hypothesis-generated gRPC requests and 1,000 random or mutated records on
every topic a service consumes, against a local cluster (TLS, tokens, signed records).

Pass: no INTERNAL or UNKNOWN answer, no service process exits, every record no consumer can
decode reaches frenzy.deadletter with a reason, and a new job runs to the end afterwards.
Saves bench/results/fuzz.json. The short version runs in `make test` (tests/test_e2e_fuzz.py).

    .venv/bin/python bench/fuzz.py [--requests 5000] [--records 1000] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from frenzy.ports import free_port
from frenzy.tools.fuzz import run_fuzz
from frenzy.tools.localcluster import start_cluster

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--records", type=int, default=1000, help="per topic")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        cluster = start_cluster(ROOT / "tests" / "data" / "cluster_small.yaml", free_port(), Path(workdir),
                                "has", extra_env={"FRENZY_TIME_SCALE": "0.01"}, namespace="fuzz-bench")
        try:
            report = run_fuzz(cluster, args.requests, args.records, args.seed)
        finally:
            cluster.stop()
    summary = {**report.summary(), "seed": args.seed, "wall_s": round(time.monotonic() - started, 1),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other work)",
               "examples_of_internal": report.bad_answers[:5],
               "examples_not_dead_lettered": report.missing_dead_letters[:5]}
    print(json.dumps(summary, indent=2))
    out = ROOT / "bench" / "results" / "fuzz.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"saved {out}")
    raise SystemExit(0 if report.ok() else 1)


if __name__ == "__main__":
    main()
