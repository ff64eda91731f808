"""Orchestrator under load: 1,000 simulated nodes of 8 GPUs heartbeating at 1 Hz from a few
fleet processes (bench/fleet.py), while 2,000 jobs flow through the real predictor, scheduler
and orchestrator on a real broker.

Prints heartbeat processing lag (p50/p99, from the orchestrator's own histogram), submit-to-
running p50/p99 (from the orchestrator's job records), orchestrator CPU and RSS, and whether any
job was lost; saves them to bench/results/orchestrator_load.json.

The broker is $KAFKA_BOOTSTRAP when set (e.g. Apache Kafka from deploy/kafka/run_kafka.py), else
the embedded Tansu broker. The JSON names the broker used; for an external one it is read from
the process listening on the bootstrap port (or give --broker-label).

    .venv/bin/python bench/orchestrator_load.py [--nodes 1000] [--jobs 2000] [--rate 20]
    KAFKA_BOOTSTRAP=127.0.0.1:19092 .venv/bin/python bench/orchestrator_load.py --out ...
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from collections import Counter
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

from frenzy.client import FrenzyClient
from frenzy.config import BusSettings
from frenzy.jobstates import TERMINAL
from frenzy.ports import free_port, wait_for_port
from frenzy.tools.broker import start_embedded_broker, tansu_version
from frenzy.tools.localcluster import LocalCluster
from frenzy.v1 import types_pb2

HERE = Path(__file__).resolve().parent
GPU_MIX = ("A100-80GB", "A100-40GB", "V100-32GB", "T4")  # one fleet process each
MODELS = ("gpt2", "gpt2-medium", "llama3.2-1b", "tinyllama-1.1b")


def histogram_buckets(metrics_text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound."""
    buckets = {}
    for line in metrics_text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="')[1].split('"')[0]
            buckets[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return buckets


def histogram_quantile(buckets_by_bound: dict[float, float], q: float) -> float:
    """Prometheus-style quantile from cumulative buckets (linear within a bucket)."""
    buckets = sorted(buckets_by_bound.items())
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def metric_value(metrics_text: str, sample: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def job_spec(rng: random.Random, i: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=f"load-{i}", model=rng.choice(MODELS),
        constraints=types_pb2.Constraints(max_gpus=rng.choice((1, 2, 4, 8))),
        training=types_pb2.TrainingConfig(seq_len=1024, global_batch_size=32, tokens=10_000_000))


class CpuSampler(threading.Thread):
    """CPU % and RSS of each named process, once a second."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.cpu_percent: dict[str, list[float]] = {name: [] for name in pids}
        self.rss_bytes: dict[str, list[int]] = {name: [] for name in pids}
        self.stopped = threading.Event()

    def run(self) -> None:
        for process in self.processes.values():
            process.cpu_percent()
        while not self.stopped.wait(1.0):
            for name, process in self.processes.items():
                try:
                    self.cpu_percent[name].append(process.cpu_percent())
                    self.rss_bytes[name].append(process.memory_info().rss)
                except psutil.Error:
                    pass


def listening_process(bootstrap: str) -> psutil.Process | None:
    """The local process listening on the bootstrap address's port, if it can be seen."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return psutil.Process(conn.pid)
    except (psutil.Error, OSError):
        pass
    return None


def describe_broker(process: psutil.Process | None) -> str:
    """"apache-kafka 4.1.1" or "tansu 0.6.0" from the broker process's command line."""
    if process is None:
        return "external (unknown)"
    try:
        cmdline = process.cmdline()
    except psutil.Error:
        return "external (unknown)"
    if cmdline and Path(cmdline[0]).name == "tansu":
        out = subprocess.run([cmdline[0], "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "tansu"
    if "kafka.Kafka" in cmdline and "-cp" in cmdline:
        for entry in cmdline[cmdline.index("-cp") + 1].split(os.pathsep):
            folder = Path(entry[:-1]) if entry.endswith("*") else Path(entry).parent
            for jar in sorted(folder.glob("kafka_2.13-*.jar")):
                version = jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")
                if version.replace(".", "").isdigit():
                    return f"apache-kafka {version}"
        return "apache-kafka"
    return f"external ({Path(cmdline[0]).name if cmdline else 'unknown'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=20.0, help="job submissions per second")
    parser.add_argument("--policy", default="has")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "orchestrator_load.json")
    parser.add_argument("--broker-label", default="",
                        help='what the JSON calls the broker, e.g. "apache-kafka 4.1.1"; '
                             "read from the broker's process when not given")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="frenzy-load-"))
    if os.environ.get("KAFKA_BOOTSTRAP"):
        broker, bootstrap = None, os.environ["KAFKA_BOOTSTRAP"]
        broker_process = listening_process(bootstrap)
        broker_label = args.broker_label or describe_broker(broker_process)
    else:
        broker = start_embedded_broker(log_path=workdir / "broker.log")
        bootstrap, broker_process = broker.bootstrap, psutil.Process(broker.process.pid)
        broker_label = args.broker_label or tansu_version()
    print(f"broker: {broker_label} at {bootstrap}")
    cluster = LocalCluster(workdir, free_port(), bootstrap=bootstrap, broker=broker,
                           metrics_port=free_port(), namespace=f"load{int(time.time())}")
    env = {"FRENZY_POLICY": args.policy, "FRENZY_METRICS_PORT": str(cluster.metrics_port),
           "FRENZY_NAMESPACE": cluster.namespace}
    fleets: list[subprocess.Popen] = []
    try:
        cluster.spawn("orchestrator", ["frenzy_orchestrator"], env)
        cluster.spawn("predictor", ["frenzy_predictor"], env)
        cluster.spawn("scheduler", ["frenzy_scheduler"], env)
        per_fleet = args.nodes // len(GPU_MIX)
        for k, gpu_type in enumerate(GPU_MIX):
            count = per_fleet if k < len(GPU_MIX) - 1 else args.nodes - per_fleet * k
            with open(workdir / f"fleet-{k}.log", "ab") as log:
                fleets.append(subprocess.Popen(
                    [sys.executable, str(HERE / "fleet.py"), "--first", str(k * per_fleet),
                     "--nodes", str(count), "--gpu-type", gpu_type],
                    # One process stands in for many agents; it may batch their heartbeats.
                    env=cluster.env({**env, "FRENZY_LINGER_MS": "20"}), stdout=log,
                    stderr=subprocess.STDOUT))
        wait_for_port("127.0.0.1", cluster.grpc_port, 60)
        pids = {name: proc.pid for name, proc in cluster.processes.items()}
        pids.update({f"fleet-{k}": fleet.pid for k, fleet in enumerate(fleets)})
        if broker_process is not None:
            pids["broker"] = broker_process.pid
        sampler = CpuSampler(pids)
        sampler.start()
        with FrenzyClient(cluster.grpc_address, timeout_s=60) as client:
            deadline = time.monotonic() + 120
            while client.cluster_summary().nodes_ready < args.nodes:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {client.cluster_summary().nodes_ready} nodes joined")
                time.sleep(0.5)
            print(f"{args.nodes} nodes ready; submitting {args.jobs} jobs at {args.rate}/s")
            # Lag is measured over the workload only: heartbeats sent while the orchestrator was
            # still joining its consumer group wait seconds, and say nothing about steady state.
            before = scrape(cluster.metrics_port)
            rng = random.Random(args.seed)
            started = time.monotonic()
            job_ids = []
            windows: list[tuple[int, str]] = [(0, before)]  # (seconds in, metrics) for lag over time
            # Submissions go out on schedule from a few threads, as from many users, so one slow
            # call does not hold back the rest.
            with ThreadPoolExecutor(max_workers=8) as pool:
                pending = []
                for i in range(args.jobs):
                    if i % max(1, int(args.rate * 10)) == 0 and i:
                        windows.append((round(time.monotonic() - started), scrape(cluster.metrics_port)))
                    job_id = f"{cluster.namespace}-{i}"
                    pending.append(pool.submit(client.submit, job_spec(rng, i), job_id))
                    job_ids.append(job_id)
                    delay = started + (i + 1) / args.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                for future in pending:
                    future.result()
            submitted_s = time.monotonic() - started
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                windows.append((round(time.monotonic() - started), scrape(cluster.metrics_port)))
                jobs = client.list()
                done = sum(1 for j in jobs if j.state in TERMINAL)
                if done >= args.jobs:
                    break
                print(f"  {done}/{args.jobs} finished", end="\r", flush=True)
                time.sleep(2)
            jobs = {j.id: j for j in client.list()}
            elapsed_s = time.monotonic() - started
        sampler.stopped.set()
        metrics = scrape(cluster.metrics_port)
    finally:
        for fleet in fleets:
            fleet.terminate()
        for fleet in fleets:
            try:
                fleet.wait(10)
            except subprocess.TimeoutExpired:
                fleet.kill()
        cluster.stop()

    mine = [jobs[j] for j in job_ids if j in jobs]
    states = {types_pb2.JobState.Name(s): sum(1 for j in mine if j.state == s)
              for s in {j.state for j in mine}}
    to_running = np.array([(j.started_at.ToNanoseconds() - j.submitted_at.ToNanoseconds()) / 1e9
                           for j in mine if j.started_at.seconds])
    lag = "frenzy_heartbeat_lag_seconds"
    lag_before, lag_after = histogram_buckets(before, lag), histogram_buckets(metrics, lag)
    lag_buckets = {bound: count - lag_before.get(bound, 0.0) for bound, count in lag_after.items()}
    lag_p99_over_time = []
    for (_, earlier), (at_s, later) in zip(windows, windows[1:]):
        a, b = histogram_buckets(earlier, lag), histogram_buckets(later, lag)
        lag_p99_over_time.append((at_s, round(histogram_quantile(
            {bound: count - a.get(bound, 0.0) for bound, count in b.items()}, 0.99), 3)))
    to_placed = np.array([(j.placed_at.ToNanoseconds() - j.submitted_at.ToNanoseconds()) / 1e9
                          for j in mine if j.placed_at.seconds])
    result = {
        "nodes": args.nodes, "gpus": args.nodes * 8, "jobs": args.jobs, "rate_per_s": args.rate,
        "achieved_rate_per_s": round(args.jobs / submitted_s, 1),
        "policy": args.policy, "broker": broker_label,
        "fetch_max_wait_ms": BusSettings().fetch_max_wait_ms,  # FRENZY_FETCH_MAX_WAIT_MS
        "wall_s": round(elapsed_s, 1),
        "heartbeats_processed": int(metric_value(metrics, f"{lag}_count")
                                    - metric_value(before, f"{lag}_count")),
        "heartbeat_lag_p50_s": round(histogram_quantile(lag_buckets, 0.50), 4),
        "heartbeat_lag_p99_s": round(histogram_quantile(lag_buckets, 0.99), 4),
        "heartbeat_lag_p99_s_by_window": lag_p99_over_time,
        "submit_to_placed_p50_s": round(float(np.percentile(to_placed, 50)), 3) if len(to_placed) else None,
        "submit_to_running_p50_s": round(float(np.percentile(to_running, 50)), 3) if len(to_running) else None,
        "submit_to_running_p99_s": round(float(np.percentile(to_running, 99)), 3) if len(to_running) else None,
        "orchestrator_cpu_mean_percent": round(float(np.mean(sampler.cpu_percent["orchestrator"])), 1),
        "orchestrator_cpu_max_percent": round(float(np.max(sampler.cpu_percent["orchestrator"])), 1),
        "orchestrator_rss_max_mib": round(max(sampler.rss_bytes["orchestrator"]) / 2**20, 1),
        "cpu_mean_percent_by_process": {name: round(float(np.mean(v)), 1)
                                        for name, v in sampler.cpu_percent.items() if v},
        "job_states": states,
        "failure_reasons": dict(Counter(j.reason[:80] for j in mine if j.state == types_pb2.FAILED)),
        "jobs_lost": args.jobs - len(mine) + sum(1 for j in mine if j.state not in TERMINAL),
        "jobs_succeeded": states.get("SUCCEEDED", 0),
    }
    result["targets"] = {"heartbeat_lag_p99_under_1s": result["heartbeat_lag_p99_s"] < 1.0,
                         "no_job_lost": result["jobs_lost"] == 0}
    print()
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
