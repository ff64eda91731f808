"""Chaos on `frenzy up`: a 100-job workload while a seeded schedule SIGKILLs one component every
10-20 s (orchestrator, scheduler, predictor, error recorder, a node agent, the broker), each
restarted by the supervisor. The baseline is the same workload and seed without kills, in the
same run. Prints, for both:

- jobs lost (acknowledged by SubmitJob, unknown at the end), stuck (not terminal at the end),
  failed, and the makespan;
- duplicate launches: a (job, attempt, rank) process started more than once;
- wasted GPU-seconds: GPU time of processes whose attempt is not the job's succeeding one;
- recovery time per component: from the kill to the restarted process's "started" log line
  (orchestrator, scheduler, predictor, agents; the error recorder's faust "Ready"; for the broker
  the supervisor's "restarted", written once Tansu listens again on its port);
- and whether a job submitted after the chaos ends runs to completion.

Each job is one GPU running a Python sleep of 20-60 s (seeded) that writes start and end lines
to a shared file. Results go to bench/results/chaos.json.

    .venv/bin/python bench/chaos.py [--jobs 100] [--seed 7] [--no-baseline]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import grpc
import numpy as np

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.ports import free_port
from frenzy.tools.localcluster import DEFAULT_CLUSTER
from frenzy.v1 import types_pb2

COMPONENTS = ["orchestrator", "scheduler", "predictor", "errors", "agent", "broker"]
READY_LINE = {"orchestrator": "orchestrator started", "scheduler": "scheduler started",
              "predictor": "predictor started", "errors": "[^Worker]: Ready", "agent": "agent started"}
JOB_SCRIPT = """
import os, signal, sys, time
log = os.environ["CHAOS_RUN_LOG"]
me = f"{os.environ['FRENZY_JOB_ID']} {os.environ['FRENZY_ATTEMPT']} {os.environ.get('RANK', '0')} {os.getpid()}"
def line(kind):
    with open(log, "a") as f:
        f.write(f"{kind} {me} {time.time():.3f}\\n")
def term(*_):
    line("end-term"); sys.exit(143)
signal.signal(signal.SIGTERM, term)
line("start")
time.sleep(float(sys.argv[1]))
line("end-ok")
"""


def spec(i: int, seconds: float, run_log: Path) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=f"chaos-{i}", model="gpt2",
        entrypoint=[sys.executable, "-c", JOB_SCRIPT, f"{seconds:.1f}"],
        env={"CHAOS_RUN_LOG": str(run_log)}, constraints=types_pb2.Constraints(max_gpus=1),
        training=types_pb2.TrainingConfig(seq_len=512, global_batch_size=8, tokens=1_000_000))


class Up:
    def __init__(self, workdir: Path, cluster: Path) -> None:
        self.workdir, self.port = workdir, free_port()
        self.log_path = workdir.parent / f"{workdir.name}-up.log"
        env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "frenzy.tools.cli", "up", "--cluster", str(cluster), "--workdir",
                 str(workdir), "--grpc-port", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True)
        deadline = time.monotonic() + 180
        while b"nodes ready" not in self.log_path.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"frenzy up did not start: see {self.log_path}")
            time.sleep(0.5)
        self.address = f"127.0.0.1:{self.port}"

    def pids(self) -> dict[str, int]:
        return json.loads((self.workdir / "cluster.json").read_text())["pids"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def submit_with_retry(client: FrenzyClient, job_spec: types_pb2.JobSpec, job_id: str,
                      timeout_s: float = 120) -> bool:
    """Resubmit the same id until acknowledged (an idempotent retry while the orchestrator or the
    broker is down)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.submit(job_spec, job_id)
            return True
        except grpc.RpcError:
            time.sleep(1.0)
    return False


def chaos_loop(up: Up, rng: random.Random, stop: threading.Event, kills: list[dict],
               interval_s: tuple[float, float]) -> None:
    order: list[str] = []
    while not stop.wait(rng.uniform(*interval_s)):
        if not order:
            order = COMPONENTS[:]
            rng.shuffle(order)
        kind = order.pop()
        pids = up.pids()
        name = rng.choice(sorted(n for n in pids if n.startswith("agent-"))) if kind == "agent" else kind
        if name not in pids:
            continue
        try:
            os.kill(pids[name], signal.SIGKILL)
        except ProcessLookupError:
            continue
        kills.append({"component": kind, "process": name, "pid": pids[name], "at": time.time()})
        print(f"  chaos: SIGKILL {name} (pid {pids[name]})", flush=True)


def recovery_s(workdir: Path, kill: dict) -> float | None:
    """Seconds from the kill to the first readiness line of the process after it."""
    if kill["component"] == "broker":
        path, match = workdir / "logs" / "supervisor.log", '"restarted", "process": "broker"'
    else:
        path, match = workdir / "logs" / f"{kill['process']}.log", READY_LINE[kill["component"]]
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if match not in line:
            continue
        try:
            ts = json.loads(line)["ts"]
        except (ValueError, KeyError):
            continue
        if ts > kill["at"]:
            return round(ts - kill["at"], 2)
    return None


def run(args, chaos: bool, base: Path) -> dict:
    label = "chaos" if chaos else "baseline"
    workdir = base / label
    workdir.mkdir(parents=True)
    run_log = workdir / "runs.log"
    rng = random.Random(args.seed)
    durations = [rng.uniform(args.job_min_s, args.job_max_s) for _ in range(args.jobs)]
    up = Up(workdir / "cluster", Path(args.cluster))
    print(f"{label}: frenzy up ready at {up.address}", flush=True)
    kills: list[dict] = []
    stop = threading.Event()
    chaos_thread = threading.Thread(target=chaos_loop, args=(up, random.Random(args.seed + 1), stop,
                                                             kills, (10.0, 20.0)), daemon=True)
    started = time.time()
    if chaos:
        chaos_thread.start()
    acknowledged: list[str] = []
    try:
        with FrenzyClient(up.address, timeout_s=10) as client:
            for i, seconds in enumerate(durations):
                job_id = f"{label}-{i}"
                if submit_with_retry(client, spec(i, seconds, run_log), job_id):
                    acknowledged.append(job_id)
                time.sleep(args.submit_gap_s)
            states: dict[str, types_pb2.Job | None] = {}
            deadline = time.monotonic() + args.drain_s
            while time.monotonic() < deadline:
                states = {}
                for job_id in acknowledged:
                    try:
                        states[job_id] = client.get(job_id)
                    except grpc.RpcError as err:
                        states[job_id] = None if err.code() == grpc.StatusCode.NOT_FOUND else states.get(job_id)
                if all(j is not None and j.state in TERMINAL for j in states.values()):
                    break
                time.sleep(2)
            makespan_s = time.time() - started
            stop.set()
            if chaos:
                chaos_thread.join(timeout=30)
                time.sleep(25)  # let the last killed component come back
            after_id = f"{label}-after"
            after_ok = submit_with_retry(client, spec(-1, 2.0, run_log), after_id)
            after = None
            deadline = time.monotonic() + 180
            while after_ok and time.monotonic() < deadline:
                try:
                    after = client.get(after_id)
                except grpc.RpcError:
                    after = None
                if after is not None and after.state in TERMINAL:
                    break
                time.sleep(1)
    finally:
        stop.set()
        up.stop()
    lost = [j for j, s in states.items() if s is None]
    stuck = [j for j, s in states.items() if s is not None and s.state not in TERMINAL]
    failed = {j: s.reason for j, s in states.items() if s is not None and s.state == types_pb2.FAILED}
    starts: Counter = Counter()
    run_start: dict[tuple, float] = {}
    run_end: dict[tuple, float] = {}
    for line in run_log.read_text().splitlines():
        kind, job_id, attempt, rank, pid, ts = line.split()
        key = (job_id, int(attempt), int(rank), int(pid))
        if kind == "start":
            starts[(job_id, int(attempt), int(rank))] += 1
            run_start[key] = float(ts)
        else:
            run_end[key] = float(ts)
    duplicates = sum(n - 1 for n in starts.values() if n > 1)
    end_of_run = started + makespan_s
    wasted = 0.0
    for key, t0 in run_start.items():
        if key[0] not in states:
            continue  # the job submitted after the chaos
        job = states.get(key[0])
        useful = job is not None and job.state == types_pb2.SUCCEEDED and job.attempt == key[1]
        if not useful:
            wasted += run_end.get(key, end_of_run) - t0
    recovery: dict[str, list[float]] = defaultdict(list)
    unrecovered = []
    for kill in kills:
        value = recovery_s(workdir / "cluster", kill)
        if value is None:
            unrecovered.append(kill["process"])
        else:
            recovery[kill["component"]].append(value)
    return {
        "label": label, "jobs": len(durations), "acknowledged": len(acknowledged),
        "lost": len(lost), "stuck": len(stuck), "failed": len(failed),
        "failed_reasons": sorted(set(failed.values()))[:10],
        "duplicate_launches": duplicates, "wasted_gpu_s": round(wasted, 1),
        "makespan_s": round(makespan_s, 1), "kills": len(kills),
        "kills_per_component": dict(Counter(k["component"] for k in kills)),
        "recovery_s": {c: {"n": len(v), "p50": round(float(np.percentile(v, 50)), 2),
                           "p99": round(float(np.percentile(v, 99)), 2)} for c, v in sorted(recovery.items())},
        "unrecovered": unrecovered,
        "after_chaos_job": types_pb2.JobState.Name(after.state) if after is not None else "never acknowledged",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cluster", default=str(DEFAULT_CLUSTER))
    parser.add_argument("--submit-gap-s", type=float, default=0.5)
    parser.add_argument("--job-min-s", type=float, default=20)
    parser.add_argument("--job-max-s", type=float, default=60)
    parser.add_argument("--drain-s", type=float, default=900)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="frenzy-chaos-"))
    print(f"workdirs under {base}; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    results = []
    if not args.no_baseline:
        results.append(run(args, chaos=False, base=base))
    results.append(run(args, chaos=True, base=base))
    keys = ["acknowledged", "lost", "stuck", "failed", "duplicate_launches", "wasted_gpu_s",
            "makespan_s", "kills", "after_chaos_job"]
    print(f"\n{'':22}" + "".join(f"{r['label']:>14}" for r in results))
    for key in keys:
        print(f"{key:22}" + "".join(f"{str(r[key]):>14}" for r in results))
    chaos = results[-1]
    print("\nrecovery after SIGKILL (s), chaos run:")
    for component, stats in chaos["recovery_s"].items():
        print(f"  {component:14} n={stats['n']:<3} p50={stats['p50']:<7} p99={stats['p99']}")
    if chaos["unrecovered"]:
        print(f"  no readiness line found after: {chaos['unrecovered']}")
    if chaos["failed_reasons"]:
        print(f"failed reasons: {chaos['failed_reasons']}")
    out = Path(__file__).parent / "results" / "chaos.json"
    out.write_text(json.dumps({"seed": args.seed, "cores": os.cpu_count(), "results": results}, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
