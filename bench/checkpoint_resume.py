"""Checkpoint and resume figures (issue 13), on this machine's CPUs, beside the baseline of the
same run: a job that restarts from step 0 (what Frenzy did before checkpoints).

1. Checkpoint overhead: the reference trainer on CPU (1 rank, gloo-free), per model and per
   save mode (synchronous `dcp.save`, asynchronous `dcp.async_save`): median step time, the
   time the loop stands still for one save (the trainer's `save_s`: the whole write when
   synchronous; staging plus any wait for the previous write when asynchronous), and the cost
   per save within the same run: the steps from the save to its commit against the run's other
   steps (the stall, plus the slowdown while the write thread competes with training for the
   CPU cores). Overhead at a checkpoint every k steps = cost / (k x step). Cross-check:
   training time against a run without checkpoints (a separate run: the machine's load drifts).
2. Node loss: a local cluster (real broker, services, agents; two simulated 2-GPU nodes; node
   timeout FRENZY_NODE_TIMEOUT_S), a DP2 tiny-gpt2 job checkpointing every k steps; after its
   first commit the node (agent and job processes) is SIGKILLed. Steps redone on resume (goal
   <= k; baseline: every step done so far) and time from the kill to training again.
3. Resize latency: the same job resized DP2 -> DP1 -> DP2 ... by publishing ReshapeJob as the
   scheduler would; decision (publish) to training again (first step of the new attempt), p50/p99.
4. Live resize latency (`live_resize`): resizes the scheduler decides itself, with the live
   defaults (FRENZY_RESHAPE_JOBS on), on one 2-GPU node (tests/data/cluster_live_elastic.yaml):
   a tiny-gpt2 job starts on one GPU while a blocker holds the other; the blocker is cancelled
   and has grows the job to DP2. From the scheduler's decision (`decided_at` of the reshape's
   decision record, the same machine's clock) to the job's first step on two GPUs, as the
   client sees it; beside it, the restart the scheduler expected (its decision's reason) and
   part 3's hand-published resizes of the same run. The minimum gain is lowered as in
   tests/test_e2e_live_elastic.py (these jobs run for minutes, not hours).

    .venv/bin/python bench/checkpoint_resume.py [--trials 3] [--resizes 6] [--models tiny-gpt2,tiny-llama]
        [--parts overhead,node_loss,resize,live_resize]

Saves bench/results/checkpoint_resume.json (a run of some parts keeps the others' last figures).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from frenzy import topics
from frenzy.bus import Bus
from frenzy.client import FrenzyClient
from frenzy.config import BusSettings
from frenzy.jobstates import TERMINAL
from frenzy.ports import free_port
from frenzy.tools.localcluster import start_cluster
from frenzy.v1 import events_pb2, types_pb2

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "tests" / "data" / "cluster_elastic.yaml"
LIVE_CLUSTER = REPO / "tests" / "data" / "cluster_live_elastic.yaml"
RESULTS = REPO / "bench" / "results" / "checkpoint_resume.json"


def pct(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    arr = np.array(values)
    return {"n": len(values), "p50": round(float(np.percentile(arr, 50)), 3),
            "p99": round(float(np.percentile(arr, 99)), 3), "max": round(float(arr.max()), 3)}


# ------------------------------------------------------------------ 1. checkpoint overhead

def _trainer_run(model: str, steps: int, every: int, workdir: Path, seq_len: int, batch: int,
                 asynchronous: bool = True) -> tuple[float, list[dict]]:
    progress = workdir / "progress.jsonl"
    progress.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FRENZY_",))}
    env.update({"CUDA_VISIBLE_DEVICES": "", "FRENZY_PROGRESS_FILE": str(progress),
                "FRENZY_PLAN": json.dumps({"dp": 1, "micro_batch": batch})})
    args = [sys.executable, "-m", "frenzy_trainer", "--model", model, "--seq-len", str(seq_len),
            "--global-batch", str(batch), "--steps", str(steps)]
    if every:
        args += ["--checkpoint-uri", str(workdir / "ckpt"), "--checkpoint-every-steps", str(every)]
    if not asynchronous:
        args += ["--checkpoint-sync"]
    started = time.monotonic()
    subprocess.run(args, env=env, cwd=workdir, check=True, capture_output=True, timeout=1800)
    wall = time.monotonic() - started
    return wall, [json.loads(line) for line in progress.read_text().splitlines()]


def _step_times(lines: list[dict]) -> dict[int, float]:
    """Seconds each step took, by step (from the progress lines' time_s)."""
    times = {l["step"]: l["time_s"] for l in lines if "event" not in l}
    return {s: times[s] - times[s - 1] for s in times if s - 1 in times}


def _write_windows(lines: list[dict]) -> set[int]:
    """Steps a save slowed down: from the step after it to the step at whose boundary it was
    committed (a synchronous save: just the next one, which waited for the whole write)."""
    window, last_step = set(), 0
    for line in lines:
        if "event" not in line:
            last_step = line["step"]
        elif line["event"] == "checkpoint":
            window.update(range(line["step"] + 1, max(line["step"] + 1, last_step) + 1))
    return window


def _mode_row(lines: list[dict], plain_train_s: float, every: int) -> dict:
    """One save mode's figures, within its own run (the load on this machine drifts between
    runs): the steps a save touched against the other steps of the same run."""
    saves = [l for l in lines if l.get("event") == "checkpoint"]
    save_s = statistics.mean(l["save_s"] for l in saves)
    steps = _step_times(lines)
    window = _write_windows(lines)
    touched = [t for s, t in steps.items() if s in window]
    other_s = statistics.median(t for s, t in steps.items() if s not in window)
    # per save: the stall plus every touched step's slowdown (the write thread's CPU)
    cost_s = sum(t - other_s for t in touched) / len(saves)
    train_s = lines[-1]["time_s"]
    return {"save_s": round(save_s, 4), "saves": len(saves),
            "write_s": round(statistics.mean(l.get("write_s", l["save_s"]) for l in saves), 4),
            "step_s": round(other_s, 4),
            "steps_touched_per_save": round(len(touched) / len(saves), 2),
            "step_s_while_writing": round(statistics.median(touched), 4) if touched else None,
            "cost_per_save_s": round(cost_s, 4),
            "overhead_pct_at_every": {k: round(100 * cost_s / (k * other_s), 2)
                                      for k in (every, 100, 1000)},
            "stall_pct_at_every": {k: round(100 * save_s / (k * other_s), 2)
                                   for k in (every, 100, 1000)},
            "train_s": train_s,
            "measured_overhead_pct": round(100 * (train_s - plain_train_s) / plain_train_s, 1)}


def checkpoint_overhead(models: list[str], steps: int, every: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            workdir = Path(tmp) / model
            workdir.mkdir()
            seq_len, batch = (64, 8) if model.startswith("tiny") else (128, 2)
            plain_wall, plain = _trainer_run(model, steps, 0, workdir, seq_len, batch)
            step_s = statistics.median(_step_times(plain).values())
            row = {"model": model, "seq_len": seq_len, "global_batch": batch, "steps": steps,
                   "every_steps": every, "step_s_without": round(step_s, 4),
                   "train_s_without": plain[-1]["time_s"]}
            for mode, asynchronous in (("sync", False), ("async", True)):
                _, lines = _trainer_run(model, steps, every, workdir, seq_len, batch, asynchronous)
                row[mode] = _mode_row(lines, plain[-1]["time_s"], every)
                r = row[mode]
                print(f"  {model:12s} {mode:5s} step {r['step_s'] * 1e3:7.1f} ms  stall/save "
                      f"{r['save_s'] * 1e3:7.1f} ms  write {r['write_s'] * 1e3:7.1f} ms  steps "
                      f"touched {r['steps_touched_per_save']:.1f} at {(r['step_s_while_writing'] or 0) * 1e3:7.1f} ms"
                      f"  cost/save {r['cost_per_save_s'] * 1e3:7.1f} ms  overhead every {every}: "
                      f"{r['overhead_pct_at_every'][every]:6.2f}% (stall only "
                      f"{r['stall_pct_at_every'][every]:5.2f}%)  every 100: "
                      f"{r['overhead_pct_at_every'][100]:5.2f}%  (run vs plain run: "
                      f"{r['measured_overhead_pct']:+.1f}%; baseline without checkpoints: 0%)",
                      flush=True)
            rows.append(row)
    return rows


# ------------------------------------------------------------------ 2./3. through the system

def spec(name: str, steps: int, every: int) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(
        name=name, model="tiny-gpt2",
        constraints=types_pb2.Constraints(gpu_types=["H100-80GB"], max_gpus=2, min_gpus=2),
        entrypoint=[sys.executable, "-m", "frenzy_trainer"],
        env={"FRENZY_LR": "3e-3", "FRENZY_DIST_TIMEOUT_S": "60"},
        training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=8, steps=steps,
                                          checkpoint_every_steps=every))


def watch_until(client, job_id, until, timeout_s=180.0):
    for job in client.watch(job_id, timeout_s=timeout_s):
        if until(job):
            return job, time.monotonic()
        if job.state in TERMINAL:
            raise RuntimeError(f"job ended first: {job.reason}")
    raise RuntimeError("watch ended")


def publish(cluster, message) -> None:
    async def go():
        bus = Bus("bench-reshape", BusSettings(kafka_bootstrap=cluster.bootstrap, namespace=cluster.namespace))
        await bus.start()
        try:
            await bus.publish(topics.JOBS_PLACED, message.job_id, message)
        finally:
            await bus.stop()
    asyncio.run(go())


def wait_nodes_ready(client, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(n.state == types_pb2.NODE_READY for n in client.list_nodes()) >= count:
            return
        time.sleep(0.2)
    raise RuntimeError("nodes not ready")


def node_loss(cluster, trials: int, every: int) -> list[dict]:
    rows = []
    with FrenzyClient(cluster.grpc_address) as client:
        for trial in range(trials):
            wait_nodes_ready(client, 2)
            job_id = client.submit(spec(f"bench-node-loss-{trial}", 400, every))
            job, _ = watch_until(client, job_id, lambda j: j.HasField("checkpoint_step"))
            # let it run past the commit, so the kill lands mid-interval
            job, _ = watch_until(client, job_id, lambda j: j.progress.step >= job.checkpoint_step + every // 2 + 1)
            node, killed_at = job.assignments[0].node_id, job.progress.step
            killed = time.monotonic()
            cluster.stop_process(f"agent-{node}", signal.SIGKILL)
            for state in (cluster.workdir / "agents" / node).glob(f"{job_id}.0/state.json"):
                os.killpg(json.loads(state.read_text())["pgid"], signal.SIGKILL)
            requeued, requeued_t = watch_until(client, job_id, lambda j: j.attempt == 1)
            back, back_t = watch_until(client, job_id, lambda j: j.attempt == 1 and j.state == types_pb2.RUNNING
                                       and j.progress.step > j.resumed_from_step)
            client.cancel(job_id)
            cluster.restart(f"agent-{node}")
            row = {"every_steps": every, "killed_at_step": killed_at,
                   "resumed_from_step": back.resumed_from_step,
                   "steps_redone": killed_at - back.resumed_from_step,
                   "steps_redone_baseline_from_0": killed_at,
                   "kill_to_requeued_s": round(requeued_t - killed, 2),
                   "requeued_to_training_s": round(back_t - requeued_t, 2),
                   "kill_to_training_s": round(back_t - killed, 2)}
            rows.append(row)
            print(f"  trial {trial}: killed at step {killed_at}, resumed from {back.resumed_from_step}: "
                  f"{row['steps_redone']} steps redone (k = {every}; from 0: {killed_at}); "
                  f"kill -> re-queued {row['kill_to_requeued_s']} s, -> training {row['kill_to_training_s']} s",
                  flush=True)
    return rows


def resize_latency(cluster, resizes: int, every: int) -> list[dict]:
    rows = []
    with FrenzyClient(cluster.grpc_address) as client:
        wait_nodes_ready(client, 2)
        job_id = client.submit(spec("bench-resize", 100000, every))
        watch_until(client, job_id, lambda j: j.HasField("checkpoint_step"))
        for i in range(resizes):
            current = client.get(job_id)
            dp = 1 if current.option.num_gpus == 2 else 2
            option = types_pb2.PlanOption()
            option.CopyFrom(current.option)
            option.num_gpus, option.plan.dp = dp, dp
            before_step = current.progress.step
            decided = time.monotonic()
            publish(cluster, events_pb2.ReshapeJob(
                job_id=job_id, kind=events_pb2.RESIZE, attempt=current.attempt, option=option,
                assignments=[types_pb2.GpuAssignment(node_id=current.assignments[0].node_id,
                                                     gpu_indices=list(range(dp)))]))
            a = current.attempt
            launched, launched_t = watch_until(client, job_id, lambda j: j.attempt == a + 1)
            back, back_t = watch_until(client, job_id, lambda j: j.attempt == a + 1
                                       and j.progress.step > j.resumed_from_step)
            row = {"to_dp": dp, "step_at_decision": before_step, "resumed_from_step": back.resumed_from_step,
                   "decision_to_relaunched_s": round(launched_t - decided, 3),
                   "decision_to_training_s": round(back_t - decided, 3)}
            rows.append(row)
            print(f"  resize {i}: -> dp{dp}: decision -> relaunched {row['decision_to_relaunched_s']} s, "
                  f"-> training again {row['decision_to_training_s']} s (resumed from {back.resumed_from_step}, "
                  f"step {before_step} at the decision)", flush=True)
        client.cancel(job_id)
    return rows


def live_resize_latency(cluster, resizes: int, every: int) -> list[dict]:
    """Resizes the scheduler decides: a job started narrow, grown once the blocker is gone."""
    rows = []
    with FrenzyClient(cluster.grpc_address) as client:
        wait_nodes_ready(client, 1)
        for i in range(resizes):
            blocker = client.submit(types_pb2.JobSpec(
                name=f"bench-blocker-{i}", model="tiny-gpt2", entrypoint=["sleep", "900"],
                constraints=types_pb2.Constraints(gpu_types=["P100-16GB"], max_gpus=1),
                training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=16, steps=10)))
            watch_until(client, blocker, lambda j: j.state == types_pb2.RUNNING)
            job_id = client.submit(types_pb2.JobSpec(
                name=f"bench-live-resize-{i}", model="tiny-gpt2",
                constraints=types_pb2.Constraints(gpu_types=["P100-16GB"], max_gpus=2),
                entrypoint=[sys.executable, "-m", "frenzy_trainer"],
                env={"FRENZY_LR": "3e-3", "FRENZY_DIST_TIMEOUT_S": "120"},
                training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=16, steps=100000,
                                                  checkpoint_every_steps=every)))
            narrow, _ = watch_until(client, job_id, lambda j: j.state == types_pb2.RUNNING
                                    and j.HasField("checkpoint_step") and j.progress.step > every + 2,
                                    timeout_s=300)
            assert narrow.option.num_gpus == 1, narrow.option
            client.cancel(blocker)
            launched, _ = watch_until(client, job_id, lambda j: j.attempt == 1, timeout_s=300)
            launched_s = time.time()
            back, _ = watch_until(client, job_id, lambda j: j.attempt == 1 and j.state == types_pb2.RUNNING
                                  and j.progress.step > j.resumed_from_step, timeout_s=300)
            back_s = time.time()
            decided_s = back.decision.decided_at.ToNanoseconds() / 1e9
            expected = re.search(r"with the restart \(([0-9.]+) s\)", back.decision.reason)
            row = {"to_gpus": back.option.num_gpus, "decision": back.decision.reason,
                   "expected_restart_s": float(expected.group(1)) if expected else None,
                   "resumed_from_step": back.resumed_from_step,
                   "decision_to_relaunched_s": round(launched_s - decided_s, 3),
                   "decision_to_training_s": round(back_s - decided_s, 3)}
            rows.append(row)
            print(f"  live resize {i}: -> {row['to_gpus']} GPUs: decision -> relaunched "
                  f"{row['decision_to_relaunched_s']} s, -> training again {row['decision_to_training_s']} s "
                  f"(the scheduler expected a {row['expected_restart_s']} s restart)", flush=True)
            client.cancel(job_id)
            watch_until(client, job_id, lambda j: j.state in TERMINAL)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="tiny-gpt2,tiny-llama")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--resizes", type=int, default=6)
    parser.add_argument("--node-timeout-s", type=float, default=4.0)
    parser.add_argument("--parts", default="overhead,node_loss,resize,live_resize")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs (shared), load {os.getloadavg()[0]:.1f}"
    print(f"machine: {machine}")
    summary = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    summary["machine"] = machine
    if "overhead" in parts:
        print("1. checkpoint overhead (reference trainer, CPU, 1 rank; sync vs async saves):")
        summary["checkpoint_overhead"] = checkpoint_overhead(args.models.split(","), args.steps, args.every)
    if parts & {"node_loss", "resize"}:
        with tempfile.TemporaryDirectory() as tmp:
            cluster = start_cluster(CLUSTER, free_port(), Path(tmp), "has", namespace=f"bench{int(time.time())}",
                                    extra_env={"FRENZY_NODE_TIMEOUT_S": str(args.node_timeout_s)})
            try:
                if "node_loss" in parts:
                    print(f"2. node loss (k = 5 steps, node timeout {args.node_timeout_s} s):")
                    loss = node_loss(cluster, args.trials, 5)
                    summary["node_loss"] = {
                        "trials": loss,
                        "steps_redone": pct([r["steps_redone"] for r in loss]),
                        "steps_redone_baseline_from_0": pct([r["steps_redone_baseline_from_0"] for r in loss]),
                        "kill_to_training_s": pct([r["kill_to_training_s"] for r in loss]),
                        "node_timeout_s": args.node_timeout_s}
                if "resize" in parts:
                    print("3. resize latency (DP2 <-> DP1, tiny-gpt2):")
                    resize = resize_latency(cluster, args.resizes, 5)
                    summary["resize"] = {
                        "resizes": resize,
                        "decision_to_training_s": pct([r["decision_to_training_s"] for r in resize]),
                        "decision_to_relaunched_s": pct([r["decision_to_relaunched_s"] for r in resize])}
            finally:
                cluster.stop()
    if "live_resize" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            cluster = start_cluster(LIVE_CLUSTER, free_port(), Path(tmp), "has", namespace=f"benchlive{int(time.time())}",
                                    extra_env={"FRENZY_RESHAPE_MIN_GAIN_S": "0",
                                               "FRENZY_RESHAPE_MIN_GAIN_FRACTION": "0",
                                               "FRENZY_CHECKPOINT_GRACE_S": "60"})
            try:
                load_before = os.getloadavg()[0]
                print(f"4. live resize latency (has grows DP1 -> DP2 by itself, tiny-gpt2; load {load_before:.1f}):")
                live = live_resize_latency(cluster, args.resizes, 5)
                summary["live_resize"] = {
                    "resizes": live, "load_before": round(load_before, 1),
                    "load_after": round(os.getloadavg()[0], 1),
                    "decision_to_training_s": pct([r["decision_to_training_s"] for r in live]),
                    "decision_to_relaunched_s": pct([r["decision_to_relaunched_s"] for r in live]),
                    "expected_restart_s": pct([r["expected_restart_s"] for r in live
                                               if r["expected_restart_s"] is not None])}
            finally:
                cluster.stop()
    print(json.dumps({k: v for k, v in summary.items() if k in ("node_loss", "resize", "live_resize")},
                     indent=1)[:4000])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2))
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
