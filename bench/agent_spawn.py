"""Starting a job's ranks: one after the other (the agent before issue 13), the first rank then
the others in parallel threads (`frenzy_agent.executor.launch` without launchers), and with
pre-started rank launchers (`frenzy_agent.prestart`, the agent's default), in the same process,
runs interleaved in random order. `--busy N` keeps N processes spinning meanwhile, as the other
jobs' ranks and the services do on a loaded node. The prestarted arm waits until its pool is
full again before each trial (on a node, launches are a job's run apart); each arm's ranks must
leave an exit record of 0, so a rank that never ran fails the bench.

A start returns once its child has exec'd the exit-recording `sh` wrapper (`subprocess.Popen`
waits for the exec); on a busy node each child waits for a core, so one after the other the
waits add up. The program here is `sleep`: this measures the agent's part of
`launch_to_agent_running_published` (its `spawn_s`), not a trainer's start-up. On the demo
cluster spawn_s is larger (the ranks of other jobs start Python at the same moment, and the
agent's event loop shares the interpreter); bench/e2e_latency.py measures that.

    .venv/bin/python bench/agent_spawn.py [--trials 30] [--ranks 4 8] [--busy 2]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from frenzy.v1 import events_pb2, types_pb2
from frenzy_agent import executor
from frenzy_agent.prestart import PrestartedRanks
from benchio import save_result


def launch_sequential(cmd: events_pb2.LaunchJob, jobs_dir: Path) -> list[int]:
    """The loop `executor.launch` had before: each rank started after the previous one."""
    workdir = (jobs_dir / executor.job_dir_name(cmd.job_id, cmd.attempt)).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    command = ["/bin/sh", "-c", executor._RECORD_EXIT, "sh", *executor.job_command(cmd)]
    pids: list[int] = []
    pgid = 0
    for local_rank in range(len(cmd.gpu_indices)):
        with open(workdir / f"rank{local_rank}.log", "ab") as log:
            proc = subprocess.Popen(
                command, env=executor.job_environment(cmd, local_rank, workdir, 1.0, ""),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                process_group=pgid)
        pgid = pgid or proc.pid
        pids.append(proc.pid)
    return pids


def spin() -> None:
    while True:
        pass


def check_ran(jobs_dir: Path, cmd: events_pb2.LaunchJob) -> None:
    """Every rank ran its program to the end: the `sh` wrapper's exit record says 0."""
    workdir = jobs_dir / executor.job_dir_name(cmd.job_id, cmd.attempt)
    for rank in range(len(cmd.gpu_indices)):
        record = workdir / f"exit.{rank}"
        for _ in range(200):  # the wrapper writes it just before the pid goes
            if record.exists() and record.read_text().strip():
                break
            time.sleep(0.005)
        code = record.read_text().strip() if record.exists() else "missing"
        if code != "0":
            raise SystemExit(f"{cmd.job_id} rank {rank}: exit record {code}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--busy", type=int, default=0, help="processes spinning meanwhile")
    parser.add_argument("--out", default="bench/results/agent_spawn.json")
    args = parser.parse_args()
    rng = random.Random(13)
    jobs_dir = Path(tempfile.mkdtemp(prefix="frenzy-spawn-"))
    spec = types_pb2.JobSpec(name="spawn", model="gpt2", entrypoint=["/bin/sleep", "0.05"],
                             training=types_pb2.TrainingConfig(seq_len=128, global_batch_size=8,
                                                               steps=1))
    arms = {"sequential": lambda cmd: launch_sequential(cmd, jobs_dir),
            "parallel": lambda cmd: executor.launch(cmd, jobs_dir, 1.0, "").pids,
            "prestarted": lambda cmd: executor.launch(cmd, jobs_dir, 1.0, "", prestarted=pool).pids}
    # The spinners fork before the pool's thread runs: a fork in the middle of its Popen would
    # hold that Popen's exec-status pipe open, and the Popen would wait for ever.
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    pool = PrestartedRanks(1, max(args.ranks))
    pool.refill()
    load_before = os.getloadavg()
    times: dict[str, dict[int, list[float]]] = {arm: {n: [] for n in args.ranks} for arm in arms}
    for trial in range(args.trials):
        for ranks in args.ranks:
            for arm in rng.sample(sorted(arms), len(arms)):
                cmd = events_pb2.LaunchJob(job_id=f"{arm}-{ranks}-{trial}", attempt=0, spec=spec,
                                           gpu_indices=list(range(ranks)), world_size=ranks)
                while arm == "prestarted" and pool.idle_sets() < pool.sets:
                    time.sleep(0.01)
                started = time.perf_counter()
                pids = arms[arm](cmd)
                times[arm][ranks].append(time.perf_counter() - started)
                pool.refill()  # as the agent does, once the launch is reported
                for pid in pids:
                    while executor._alive(pid):  # reaps (subprocess may have reaped it already)
                        time.sleep(0.005)
                check_ran(jobs_dir, cmd)
    for spinner in spinners:
        spinner.terminate()
    pool.close()
    result = {"trials": args.trials, "busy_processes": args.busy,
              "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
              "spawn_ms": {arm: {str(n): {"p50": round(float(np.percentile(v, 50)) * 1e3, 1),
                                          "p90": round(float(np.percentile(v, 90)) * 1e3, 1),
                                          "max": round(max(v) * 1e3, 1)}
                                 for n, v in by_ranks.items()} for arm, by_ranks in times.items()}}
    print(f"starting a job's ranks ({args.trials} trials per arm, load "
          f"{result['load_average_before_after']}), ms:")
    for n in args.ranks:
        for arm in arms:
            r = result["spawn_ms"][arm][str(n)]
            print(f"  {n} ranks {arm:<10} p50 {r['p50']:6.1f}  p90 {r['p90']:6.1f}  max {r['max']:6.1f}")
    save_result(result, args.out)


if __name__ == "__main__":
    main()
