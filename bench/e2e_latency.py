"""End-to-end latency on the demo cluster: 200 jobs through the real services and broker.

Prints p50/p99 of submit-to-placed, and of GPU-freed-to-next-job-launched (how fast the
event-driven scheduler reacts to availability), each broken down per hop, plus the CPU the
services and the broker use while idle and over the run, and saves them to
bench/results/e2e_latency.json.

Timestamps come from one clock (one machine): the orchestrator's job records (submitted, placed,
started, finished), the scheduler's decision record (decided_at) and every record's envelope
(`produced_at`), read back from the topics after the run. Consecutive hops telescope: their
sum is the end-to-end figure of the same job.

Two phases: a burst (~20 submissions/s, most jobs queue; the reaction to freed GPUs) and an
arrival phase (one job at a time on an otherwise idle cluster: submit to placed with no queueing).

A job the orchestrator launched from a hold (HeldPlacements: placed ahead by the scheduler,
launched in the step that releases the GPUs) has no scheduler or placement hop on its path: its
hops are printed apart (`held_reaction_hops`), and GPU freed -> next launched is also printed for
the two kinds apart. `gpu_freed_to_launch_received` is a separate figure: freed -> the next job's
LaunchJob taken by its agent (the agents' `launched` log lines), the control plane's reaction
without the job's own processes starting; the metric above keeps its meaning.

The scheduler's hop is split with its `availability` log lines (wake-up: produced -> handled;
policy: handled -> the decision that placed the job), and the five slowest reactions are kept
with their job ids and hops, which lead to the services' logs (printed at the end).

    .venv/bin/python bench/e2e_latency.py [--jobs 200] [--arrivals 50] [--policy has] [--label x]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition

from frenzy import events, topics
from frenzy.ports import free_port
from frenzy.client import FrenzyClient
from frenzy.config import DashboardSettings, ServiceSettings
from frenzy.jobstates import TERMINAL
from frenzy.tools.demo import sample_specs
from frenzy.tools.localcluster import DEFAULT_CLUSTER, LocalCluster, start_cluster
from frenzy.v1 import events_pb2, types_pb2
from benchio import save_result

QUEUED_AFTER_S = 0.5  # placed later than this after submission: it waited for GPUs
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The path from a job's GPUs being released to the next job's processes running, hop by hop.
REACTION_HOPS = ("release_to_availability_published", "availability_to_scheduler_decision",
                 "decision_to_placed_published", "placed_to_orchestrator_handled",
                 "handled_to_launch_published", "launch_to_agent_running_published",
                 "agent_running_to_orchestrator_started")
# The same path for a job launched from a hold (HeldPlacements): the orchestrator launches it in
# the step that releases the GPUs, so the scheduler's and the placement's hops are not on it.
HELD_HOPS = ("release_to_orchestrator_placed", "handled_to_launch_published",
             "launch_to_agent_running_published", "agent_running_to_orchestrator_started")
ARRIVAL_HOPS = ("submitted_to_planned_published", "planned_to_queued_published",
                "queued_to_scheduler_decision", "decision_to_placed_published",
                "placed_to_orchestrator_handled")


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
    return [launched - freed for _, _, freed, launched in _woken(jobs)]


def _woken(jobs: list[types_pb2.Job]) -> list[tuple[types_pb2.Job, str, float, float]]:
    """(waiting job, the job whose release came last before its placement, release, launch)."""
    finishes = sorted((seconds(j.finished_at), j.id) for j in jobs if j.finished_at.seconds)
    out = []
    for j in jobs:
        if not j.started_at.seconds or seconds(j.placed_at) - seconds(j.submitted_at) < QUEUED_AFTER_S:
            continue  # placed on arrival, not woken by a release
        before = [f for f in finishes if f[0] <= seconds(j.placed_at)]
        if before:
            out.append((j, before[-1][1], before[-1][0], seconds(j.started_at)))
    return out


class Records:
    """The envelopes read back from the topics, indexed for the hop breakdown."""

    def __init__(self, envelopes: list[events_pb2.Envelope]) -> None:
        self.placed: dict[str, events_pb2.Envelope] = {}  # job -> its (last) JobPlaced
        self.planned: dict[str, float] = {}  # job -> first JobPlanned produced
        self.queued: dict[str, float] = {}  # job -> first orchestrator QUEUED produced
        self.launch: dict[tuple[str, int], float] = {}  # (job, attempt) -> first LaunchJob
        self.agent_running: dict[tuple[str, int], float] = {}  # first agent RUNNING report
        # job -> its last agent SUCCEEDED report: a job of several nodes ends (and its GPUs are
        # released) with the last node's report, so the hop to the release starts there.
        self.agent_succeeded: dict[str, float] = {}
        self.released: dict[str, float] = {}  # job -> last availability "job X finished"
        self.kinds: Counter[str] = Counter()  # records per payload (agents' statuses by state)
        self.held_launch: dict[tuple[str, int], str] = {}  # (job, attempt) launched from a hold -> the job that ended
        for env in envelopes:
            at = seconds(env.produced_at)
            kind = env.WhichOneof("payload")
            self.kinds[kind] += 1
            if kind == "job_status_changed" and env.job_status_changed.source == events_pb2.AGENT:
                self.kinds["agent " + types_pb2.JobState.Name(env.job_status_changed.state)] += 1
            if kind == "job_placed":
                self.placed[env.job_placed.job_id] = env
            elif kind == "job_planned":
                self.planned.setdefault(env.job_planned.job_id, at)
            elif kind == "launch_job":
                self.launch.setdefault((env.launch_job.job_id, env.launch_job.attempt), at)
            elif kind == "gpu_availability_changed":
                cause = env.gpu_availability_changed.cause
                if cause.startswith("job ") and cause.endswith(" finished"):
                    job_id = cause[4:-9]
                    self.released[job_id] = max(at, self.released.get(job_id, 0.0))
            elif kind == "job_status_changed":
                s = env.job_status_changed
                if s.source == events_pb2.ORCHESTRATOR and s.state == types_pb2.QUEUED:
                    self.queued.setdefault(s.job_id, at)
                elif s.source == events_pb2.ORCHESTRATOR and s.state == types_pb2.PLACED \
                        and ", held for " in s.reason:
                    self.held_launch[(s.job_id, s.attempt)] = s.reason.split(", held for ", 1)[1]
                elif s.source == events_pb2.AGENT and s.state == types_pb2.RUNNING:
                    self.agent_running.setdefault((s.job_id, s.attempt), at)
                elif s.source == events_pb2.AGENT and s.state == types_pb2.SUCCEEDED:
                    self.agent_succeeded[s.job_id] = max(at, self.agent_succeeded.get(s.job_id, 0.0))


def reaction_hops(jobs: list[types_pb2.Job], rec: Records, slowest: list[dict] | None = None,
                  held: dict[str, list[float]] | None = None) -> tuple[dict[str, list[float]], int]:
    """Per hop, the seconds each woken job spent there; and how many could not be split (a
    record missing, or the scheduler decided before the release's availability was out: some
    other event placed the job). `slowest` collects each split job's hops, for the JSON's
    slowest few (their job ids and decision reasons lead to the scheduler's and agents' logs).
    Jobs launched from a hold on the release go to `held` (HELD_HOPS) instead."""
    hops: dict[str, list[float]] = {h: [] for h in ("agent_exit_report_to_release", *REACTION_HOPS)}
    unsplit = 0
    for job, freed_by, freed_s, launched_s in _woken(jobs):
        placed = rec.placed.get(job.id)
        key = (job.id, job.attempt)
        if key in rec.held_launch and key in rec.launch and key in rec.agent_running:
            stamps = [freed_s, seconds(job.placed_at), rec.launch[key], rec.agent_running[key], launched_s]
            spent = {name: b - a for name, (a, b) in zip(HELD_HOPS, zip(stamps, stamps[1:]))}
            if held is not None:
                for name, seconds_spent in spent.items():
                    held.setdefault(name, []).append(seconds_spent)
            if slowest is not None:
                slowest.append({"job_id": job.id, "freed_by": freed_by, "held_for": rec.held_launch[key],
                                "total_ms": round((launched_s - freed_s) * 1e3, 1),
                                **{name: round(v * 1e3, 1) for name, v in spent.items()}})
            if freed_by in rec.agent_succeeded:
                hops["agent_exit_report_to_release"].append(freed_s - rec.agent_succeeded[freed_by])
            continue
        if (placed is None or freed_by not in rec.released or key not in rec.launch
                or key not in rec.agent_running):
            unsplit += 1
            continue
        decided_s = seconds(placed.job_placed.decision.decided_at)
        stamps = [freed_s, rec.released[freed_by], decided_s, seconds(placed.produced_at),
                  seconds(job.placed_at), rec.launch[key], rec.agent_running[key], launched_s]
        if decided_s < rec.released[freed_by]:
            unsplit += 1
            continue
        for name, (a, b) in zip(REACTION_HOPS, zip(stamps, stamps[1:])):
            hops[name].append(b - a)
        if slowest is not None:
            slowest.append({"job_id": job.id, "freed_by": freed_by,
                            "total_ms": round((launched_s - freed_s) * 1e3, 1),
                            "reason": placed.job_placed.decision.reason,
                            **{name: round((b - a) * 1e3, 1)
                               for name, (a, b) in zip(REACTION_HOPS, zip(stamps, stamps[1:]))}})
        if freed_by in rec.agent_succeeded:
            hops["agent_exit_report_to_release"].append(freed_s - rec.agent_succeeded[freed_by])
    return hops, unsplit


def log_entries(path: Path, contains: str = "") -> Iterator[dict]:
    """The JSON entries of a service's log, skipping lines that are not JSON; with `contains`,
    only lines holding that text are parsed (the agents' logs are long); nothing if unreadable."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        if contains not in line:
            continue
        try:
            yield json.loads(line)
        except ValueError:
            continue


def scheduler_compiled(scheduler_log: Path) -> list[str] | None:
    """The scheduler modules that ran compiled (its `scheduler started` line; native.py),
    so that a figure says which build decided; None if the line is missing."""
    for entry in log_entries(scheduler_log, '"scheduler started"'):
        if entry.get("msg") == "scheduler started":
            return list(entry.get("compiled", []))
    return None


def availability_handled(scheduler_log: Path) -> dict[str, float]:
    """Job -> when the scheduler handled the last availability its release caused (its
    `availability` log lines)."""
    handled: dict[str, float] = {}
    for entry in log_entries(scheduler_log):
        cause = entry.get("cause", "") if entry.get("msg") == "availability" else ""
        if cause.startswith("job ") and cause.endswith(" finished"):
            handled[cause[4:-9]] = max(entry["ts"], handled.get(cause[4:-9], 0.0))
    return handled


def launch_received(log_dir: Path, rec: Records,
                    agent_split: dict[str, list[float]] | None = None) -> dict[tuple[str, int], float]:
    """(job, attempt) -> when the first node's agent took its LaunchJob: the command's produced
    time plus the agent's `command_lag_s` (its `launched` log lines). `agent_split` collects
    those lines' `command_lag_s` and `spawn_s` (by ranks started: 1, 2, 4, 8)."""
    received: dict[tuple[str, int], float] = {}
    for path in sorted(log_dir.glob("*.log")):
        for entry in log_entries(path, '"launched"'):
            key = (entry.get("job_id", ""), entry.get("attempt", 0))
            if entry.get("msg") == "launched" and agent_split is not None and "spawn_s" in entry:
                agent_split.setdefault("command_lag", []).append(entry.get("command_lag_s", 0.0))
                agent_split.setdefault("spawn", []).append(entry["spawn_s"])
                agent_split.setdefault(f"spawn_{len(entry.get('gpus', []))}_ranks", []).append(entry["spawn_s"])
            if entry.get("msg") == "launched" and key in rec.launch and "command_lag_s" in entry:
                at = rec.launch[key] + entry["command_lag_s"]
                received[key] = min(at, received.get(key, at))
    return received


def reaction_split(jobs: list[types_pb2.Job], rec: Records,
                   received: dict[tuple[str, int], float]) -> dict[str, list[float]]:
    """GPU freed -> next launched of the jobs launched from a hold and of the others; and GPU
    freed -> the next job's LaunchJob taken by its agent (the control plane's reaction, without
    the job's own processes starting: a separate figure, not the metric)."""
    out: dict[str, list[float]] = {"held": [], "usual": [], "freed_to_launch_received": []}
    for job, _, freed_s, launched_s in _woken(jobs):
        key = (job.id, job.attempt)
        out["held" if key in rec.held_launch else "usual"].append(launched_s - freed_s)
        if key in received:
            out["freed_to_launch_received"].append(received[key] - freed_s)
    return out


def scheduler_hop_split(jobs: list[types_pb2.Job], rec: Records,
                        handled: dict[str, float]) -> dict[str, list[float]]:
    """`availability_to_scheduler_decision` in two: the wake-up (the release's availability
    produced -> handled by the scheduler: broker hop and what the scheduler did first) and the
    policy (handled -> the decision that placed the job: the policy's own wait, e.g. HAS
    keeping GPUs for a reservation, plus its run). Millisecond log stamps."""
    split: dict[str, list[float]] = {"wake_up": [], "policy": []}
    for job, freed_by, _, _ in _woken(jobs):
        placed = rec.placed.get(job.id)
        if placed is None or freed_by not in rec.released or freed_by not in handled:
            continue
        decided_s = seconds(placed.job_placed.decision.decided_at)
        if decided_s < rec.released[freed_by]:
            continue
        split["wake_up"].append(max(0.0, handled[freed_by] - rec.released[freed_by]))
        split["policy"].append(max(0.0, decided_s - handled[freed_by]))
    return split


def arrival_hops(jobs: list[types_pb2.Job], rec: Records,
                 slowest: list[dict] | None = None) -> dict[str, list[float]]:
    """Submit -> placed of jobs that did not queue, hop by hop; `slowest` gets the five
    slowest with their hops (ms), as `slowest_reactions` does for the burst."""
    hops: dict[str, list[float]] = {h: [] for h in ARRIVAL_HOPS}
    each: list[dict] = []
    for job in jobs:
        placed = rec.placed.get(job.id)
        if placed is None or job.id not in rec.planned or job.id not in rec.queued:
            continue
        stamps = [seconds(job.submitted_at), rec.planned[job.id], rec.queued[job.id],
                  seconds(placed.job_placed.decision.decided_at), seconds(placed.produced_at),
                  seconds(job.placed_at)]
        row = {"job_id": job.id, "total_ms": round((stamps[-1] - stamps[0]) * 1e3, 1)}
        for name, (a, b) in zip(ARRIVAL_HOPS, zip(stamps, stamps[1:])):
            hops[name].append(b - a)
            row[name] = round((b - a) * 1e3, 1)
        each.append(row)
    if slowest is not None:
        slowest += sorted(each, key=lambda r: r["total_ms"])[-5:]
    return hops


async def read_envelopes(bootstrap: str, names: list[str], idle_s: float = 3.0) -> list[events_pb2.Envelope]:
    """Every record of the topics from the beginning, until none came for idle_s."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=200)
    await consumer.start()
    try:
        await consumer.topics()  # refreshes the metadata
        tps = [TopicPartition(name, p) for name in names
               for p in sorted(consumer.partitions_for_topic(name) or [])]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out, quiet_since = [], time.monotonic()
        while time.monotonic() - quiet_since < idle_s:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batch.values():
                for r in records:
                    try:
                        out.append(events.decode(r.value, r.headers))
                    except events.MalformedEvent:
                        continue
                quiet_since = time.monotonic()
        return out
    finally:
        await consumer.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def service_pids(cluster: LocalCluster) -> dict[str, int]:
    """The services, agents and broker of the cluster (agents summed as one line)."""
    pids = {name: p.pid for name, p in cluster.processes.items()}
    if cluster.broker is not None:
        pids["broker"] = cluster.broker.process.pid
    return pids


def cpu_use(pids: dict[str, int], before: dict[str, float], wall_s: float) -> dict:
    """Percent of one core per service over wall_s (agents together), and the total."""
    now = {name: cpu_seconds(pid) for name, pid in pids.items()}
    groups: dict[str, float] = {}
    for name, spent in now.items():
        group = "agents" if name.startswith("agent-") else name
        groups[group] = groups.get(group, 0.0) + spent - before.get(name, 0.0)
    out = {name: round(100 * s / wall_s, 1) for name, s in sorted(groups.items())}
    out["total"] = round(100 * sum(groups.values()) / wall_s, 1)
    out["cpu_s"] = round(sum(groups.values()), 1)
    return out


def measure_idle(pids: dict[str, int], seconds_: float) -> dict:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds_)
    return cpu_use(pids, before, seconds_)


def summarise(hops: dict[str, list[float]]) -> dict:
    return {name: percentiles(values) for name, values in hops.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--arrivals", type=int, default=50,
                        help="jobs submitted one at a time on an idle cluster (no queueing)")
    parser.add_argument("--policy", default="has")
    parser.add_argument("--time-scale", type=float, default=0.0005)
    parser.add_argument("--idle-s", type=float, default=20.0, help="idle CPU sampling window")
    parser.add_argument("--label", default="", help="a name for this configuration in the JSON")
    parser.add_argument("--out", default="bench/results/e2e_latency.json")
    args = parser.parse_args()

    rng = random.Random(7)
    specs = sample_specs()
    workdir = Path(tempfile.mkdtemp(prefix="frenzy-bench-"))
    settings = ServiceSettings()
    bus_settings = {"fetch_max_wait_ms": settings.fetch_max_wait_ms,
                 "agent_fetch_max_wait_ms": settings.agent_fetch_max_wait_ms,
                 "dashboard_fetch_max_wait_ms": DashboardSettings().dashboard_fetch_max_wait_ms,
                 "linger_ms": settings.linger_ms,
                 "agent_progress_interval_s": settings.agent_progress_interval_s}
    load_before = os.getloadavg()
    cluster = start_cluster(DEFAULT_CLUSTER, free_port(), workdir, args.policy,
                            extra_env={"FRENZY_TIME_SCALE": str(args.time_scale)})
    pids = service_pids(cluster)
    bus_settings["agent_rank_nice"] = int(cluster.env()["FRENZY_AGENT_RANK_NICE"])  # the agents'
    time.sleep(3.0)  # start-up settles (group joins, read-backs)
    idle_before = measure_idle(pids, args.idle_s)
    run_cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    arrival_ids: list[str] = []
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
            burst_wall_s = time.monotonic() - started
            run_cpu = cpu_use(pids, run_cpu_before, burst_wall_s)
            # Arrivals: one small job at a time, the next once the last one ended.
            for i in range(args.arrivals):
                spec = types_pb2.JobSpec()
                spec.CopyFrom(specs[0])
                spec.name = f"arrival-{i}"
                spec.training.tokens = 10_000_000  # short: the next arrival finds the cluster idle
                job_id = client.submit(spec)
                arrival_ids.append(job_id)
                deadline = time.monotonic() + 60
                while client.get(job_id).state not in TERMINAL and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(rng.uniform(0.1, 0.3))
            jobs = client.list()
        records = Records(asyncio.run(read_envelopes(
            cluster.bootstrap, [cluster.topic_name(t) for t in (
                topics.JOBS_STATUS, topics.JOBS_PLACED, topics.JOBS_PLANNED,
                topics.AGENT_COMMANDS, topics.CLUSTER_EVENTS)])))
        idle_after = measure_idle(pids, args.idle_s)
    finally:
        cluster.stop()
    load_after = os.getloadavg()
    wall_s = time.monotonic() - started
    arrival_set = set(arrival_ids)
    burst = [j for j in jobs if j.id not in arrival_set]
    arrivals = [j for j in jobs if j.id in arrival_set]
    placed = [seconds(j.placed_at) - seconds(j.submitted_at) for j in burst if j.placed_at.seconds]
    on_arrival = [seconds(j.placed_at) - seconds(j.submitted_at) for j in arrivals if j.placed_at.seconds]
    split: list[dict] = []
    slowest_arrivals: list[dict] = []
    held_hops: dict[str, list[float]] = {}
    hops, unsplit = reaction_hops(burst, records, split, held_hops)
    agent_split: dict[str, list[float]] = {}
    by_path = reaction_split(burst, records, launch_received(workdir / "logs", records, agent_split))
    result = {
        "label": args.label, "jobs": len(burst), "arrivals": len(arrivals), "policy": args.policy,
        "wall_s": round(wall_s, 1), "settings": bus_settings,
        "scheduler_compiled": scheduler_compiled(workdir / "logs" / "scheduler.log"),
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "succeeded": sum(j.state == types_pb2.SUCCEEDED for j in jobs),
        "submit_to_placed_all": percentiles(placed),
        "submit_to_placed_no_wait": percentiles(on_arrival),
        "gpu_freed_to_next_launched": percentiles(reaction_latencies(burst)),
        "gpu_freed_to_next_launched_held": percentiles(by_path["held"]),
        "gpu_freed_to_next_launched_usual": percentiles(by_path["usual"]),
        "gpu_freed_to_launch_received": percentiles(by_path["freed_to_launch_received"]),
        "reaction_hops": summarise(hops), "reaction_unsplit": unsplit,
        "held_reaction_hops": summarise({h: held_hops.get(h, []) for h in HELD_HOPS}),
        "agent_launch_split": summarise(dict(sorted(agent_split.items()))),
        "scheduler_hop_split": summarise(scheduler_hop_split(
            burst, records, availability_handled(workdir / "logs" / "scheduler.log"))),
        "slowest_reactions": sorted(split, key=lambda r: r["total_ms"])[-5:],
        "arrival_hops": summarise(arrival_hops(arrivals, records, slowest_arrivals)),
        "slowest_arrivals": slowest_arrivals,
        "cpu_percent_idle_before": idle_before, "cpu_percent_idle_after": idle_after,
        "cpu_percent_during_burst": run_cpu,
        "records_by_kind": dict(records.kinds.most_common()),
    }
    print(f"e2e latency {args.label}: {result['jobs']} jobs + {result['arrivals']} arrivals on the "
          f"demo cluster ({args.policy}), {result['succeeded']} succeeded, {wall_s:.0f}s wall, "
          f"load {result['load_average_before_after']}, settings {bus_settings}, "
          f"scheduler modules compiled: {result['scheduler_compiled']}")
    for key in ("submit_to_placed_no_wait", "submit_to_placed_all", "gpu_freed_to_next_launched",
                "gpu_freed_to_next_launched_held", "gpu_freed_to_next_launched_usual",
                "gpu_freed_to_launch_received"):
        r = result[key]
        print(f"  {key:<38} n={r.get('n', 0):<4} p50={r.get('p50_ms', '-')} ms  p99={r.get('p99_ms', '-')} ms")
    for title, table in (("reaction hops", result["reaction_hops"]),
                         ("reaction hops, launched from a hold", result["held_reaction_hops"]),
                         ("availability_to_scheduler_decision, split", result["scheduler_hop_split"]),
                         ("agent's launch: command_lag_s, spawn_s (every launch, burst and arrivals)",
                          result["agent_launch_split"]),
                         ("arrival hops", result["arrival_hops"])):
        print(f"  {title}:")
        for name, r in table.items():
            print(f"    {name:<40} n={r.get('n', 0):<4} p50={r.get('p50_ms', '-')} ms  "
                  f"p99={r.get('p99_ms', '-')} ms  mean={r.get('mean_ms', '-')} ms")
    print(f"  idle CPU % of a core before {idle_before}")
    print(f"  idle CPU % of a core after  {idle_after}")
    print(f"  CPU % of a core during the burst {run_cpu}")
    print(f"  records read back, by kind: {result['records_by_kind']}")
    print(f"  slowest reactions (ms): {result['slowest_reactions']}")
    print(f"  slowest arrivals (ms): {result['slowest_arrivals']}")
    print(f"  services' logs: {workdir / 'logs'}")
    save_result(result, args.out)


if __name__ == "__main__":
    main()
