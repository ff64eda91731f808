"""Scheduling benchmark: every policy on Philly windows, on two clusters, at the trace's own
arrival rate and at offered load 0.85, with the simulator's realism defaults; the parity
ablation; a decision-time sweep; the whole Philly trace under has.

    .venv/bin/python bench/scheduling.py            # full run (~30 min on 2 shared cores)
    .venv/bin/python bench/scheduling.py --quick    # 2 windows, small sweep, no whole trace
    .venv/bin/python bench/scheduling.py --only whole-trace   # one section; the rest of the
    .venv/bin/python bench/scheduling.py --only sweep         # saved JSON is kept

Writes bench/results/scheduling.json and prints one table per (cluster, load). See
docs/simulator.md and docs/has.md.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from frenzy.clusterfile import NodeGroup, load_cluster_file, scale_groups
from frenzy_scheduler import native
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.core import PLACE, PREEMPT, ClusterView, Placement, QueuedJob, RunningJob
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.policies.sia import SiaConfig, SiaPolicy
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, run_policy
from frenzy_scheduler.simulator.trace import load_trace
from frenzy_scheduler.simulator.workload import parity_menu

ROOT = Path(__file__).resolve().parents[1]
PHILLY = Path("/work/shared/data/traces/philly.csv")
if not PHILLY.exists():
    PHILLY = ROOT.parent / "shared/data/traces/philly.csv"
CLUSTERS = {"frenzy-288": ROOT / "deploy/clusters/frenzy-288.yaml",
            "alibaba-2026-492": ROOT / "deploy/clusters/alibaba-2026-492.yaml"}
POLICIES = ["fifo", "frenzy", "frenzy-narrow", "sia", "sia-static", "has"]
PARITY = "@parity"  # suffix: the same policy on the parity menu (options <= trace GPUs)
WINDOW_JOBS = 500
WINDOW_STARTS = (5_000, 15_000, 25_000, 35_000, 45_000)  # trace job index of each window's start
LOADS = (0.0, 0.85)  # 0: the trace's own arrival times
SIA_SWEEP_CAP_S = 10.0  # HiGHS time cap per sia decision in the overhead sweep
SWEEP_BUDGET_S = 20.0  # timed calls per (point, policy): as many as fit, within the bounds below
SWEEP_MIN_SAMPLES, SWEEP_MAX_SAMPLES = 3, 200
RECORD_READ_CALLS = 3  # calls whose records are read and timed, after the timed calls
SWEEP_GRID = ((100, 100), (1000, 500), (1000, 5000), (10000, 500), (10000, 5000))  # GPUs, queued
# The per-event measurement (`time_events`): a sequence of this many events per sweep point
# (the same for every policy), of which each policy times as many as EVENT_BUDGET_S allows
# (at least SWEEP_MIN_SAMPLES), after at most FILL_MAX_CALLS decisions that fill the cluster
EVENT_COUNT = 100
EVENT_BUDGET_S = 5.0
FILL_MAX_CALLS = 3
MIN_LEFT = 0.01  # the least work a moved job has left in the per-event state (`EventState.apply`)
SUMMARY_KEYS = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "slowest_1pct_jct_s", "avg_queue_s",
                "p99_queue_s", "makespan_s", "utilization", "utilization_arrivals", "gpu_hours",
                "restarts", "decision_p50_s", "decision_p99_s", "decision_total_s",
                "unschedulable", "sim_wall_s")

CURVE_KEYS = ("utilization_over_time", "utilization_over_time_by_type")  # not saved
console = Console(stderr=True)


def window_runs(trace: list, groups: list[NodeGroup], starts: tuple[int, ...], load: float,
                policies: list[str], config: SimConfig,
                kept: list[dict[str, Any]] | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """`kept`: saved windows of an earlier run whose policies not in `policies` are copied
    (`--rerun has` after a change to has alone; the others' runs are deterministic). `seed`:
    the trace-to-model mapping's (`prepare_jobs`; the benchmark's is 0, bench/has_seeds.py
    varies it)."""
    runs = []
    for position, start_index in enumerate(starts):
        start_s = trace[start_index].submit_time_s
        jobs = prepare_jobs(trace, groups, start_s=start_s, count=WINDOW_JOBS, load=load, seed=seed)
        parity = parity_menu(jobs)
        window = {"start_index": start_index, "start_s": start_s,
                  "span_h": (jobs[-1].submit_time_s - jobs[0].submit_time_s) / 3600,
                  "policies": {}}
        if kept:
            assert kept[position]["start_index"] == start_index, "saved windows differ"
            window["policies"] = {name: metrics for name, metrics in
                                  kept[position]["policies"].items() if name not in policies}
        for name in policies:
            base, _, ablation = name.partition("@")
            tick = time.perf_counter()
            metrics = run_policy(base, parity if ablation else jobs, groups, config=config)
            for key in CURVE_KEYS:  # keep the JSON small (the curves made it 4.5 MB)
                metrics.pop(key, None)
            window["policies"][name] = metrics
            console.log(f"load {load} window {start_index} {name}: avg JCT "
                        f"{metrics['avg_jct_s'] / 3600:.2f} h ({time.perf_counter() - tick:.1f} s)")
        runs.append(window)
    return runs


def summarize_cluster(runs: list[dict[str, Any]], policies: list[str]) -> dict[str, Any]:
    def mean(name: str, key: str) -> float:
        return statistics.fmean(r["policies"][name][key] for r in runs)

    summary: dict[str, Any] = {"per_policy": {}, "has_vs": {}}
    for name in policies:
        summary["per_policy"][name] = {key: mean(name, key) for key in SUMMARY_KEYS}
    for ours in ("has", "has" + PARITY):
        if ours not in policies:
            continue
        for name in policies:
            if name == ours:
                continue
            per_window = [r["policies"][ours]["avg_jct_s"] / r["policies"][name]["avg_jct_s"]
                          for r in runs]
            summary["has_vs" if ours == "has" else "has_parity_vs"] = summary.get(
                "has_vs" if ours == "has" else "has_parity_vs", {})
            summary["has_vs" if ours == "has" else "has_parity_vs"][name] = {
                "avg_jct_ratio_mean_over_windows": statistics.fmean(per_window),
                "avg_jct_ratio_per_window": per_window,
                "p99_jct_ratio": mean(ours, "p99_jct_s") / mean(name, "p99_jct_s"),
                "slowest_1pct_jct_ratio": mean(ours, "slowest_1pct_jct_s")
                / mean(name, "slowest_1pct_jct_s"),
                "gpu_hours_ratio": mean(ours, "gpu_hours") / mean(name, "gpu_hours"),
                "decision_p99_ratio": mean(ours, "decision_p99_s") / mean(name, "decision_p99_s"),
            }
    return summary


def cluster_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title)
    for column in ("policy", "avg JCT h", "p50 JCT h", "p99 JCT h", "avg queue h", "p99 queue h",
                   "GPU-h", "util", "restarts", "dec p99 ms", "has / policy avg JCT",
                   "has p99 / p99", "has GPU-h / GPU-h"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, m in summary["per_policy"].items():
        vs = summary["has_vs"].get(name, {})
        table.add_row(name, f"{m['avg_jct_s'] / 3600:.2f}", f"{m['p50_jct_s'] / 3600:.2f}",
                      f"{m['p99_jct_s'] / 3600:.1f}", f"{m['avg_queue_s'] / 3600:.2f}",
                      f"{m['p99_queue_s'] / 3600:.1f}", f"{m['gpu_hours']:.0f}",
                      f"{m['utilization']:.3f}", f"{m['restarts']:.0f}",
                      f"{m['decision_p99_s'] * 1e3:.2f}",
                      f"{vs['avg_jct_ratio_mean_over_windows']:.3f}" if vs else "-",
                      f"{vs['p99_jct_ratio']:.3f}" if vs else "-",
                      f"{vs['gpu_hours_ratio']:.3f}" if vs else "-")
    return table


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least q of the samples at or below."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def time_decisions(policy: Any, queue: list[QueuedJob], cluster: ClusterView, running: list,
                   budget_s: float) -> dict[str, Any]:
    """The one timing harness every policy gets. A first, cold call (per-job caches empty)
    is reported apart; then as many steady-state calls as `budget_s` allows, between
    SWEEP_MIN_SAMPLES and SWEEP_MAX_SAMPLES. The inputs (trace, jobs, options) are frozen
    out of the cyclic GC's view, and before every timed call the garbage of earlier calls
    is collected, so no call pays for collecting the harness's or another call's objects;
    the GC stays on during the call, so a policy pays for its own garbage.

    Each call is timed twice: wall clock (`p50_s`, `p99_s`: what a caller waits, including
    time the OS gave to other processes) and the process's CPU time (`cpu_p50_s`,
    `cpu_p99_s`: the policy's own work, all threads, not counting preemption). On a shared
    machine the wall p99 of a millisecond decision mostly measures the other processes.

    A policy may draft its decision records and build them when read (`core.Decision`; has
    does): what reading every record of one call's answer costs is timed apart, after the
    timed calls (`records_read_cpu_s`, the median over a few calls; the live scheduler pays
    it when it publishes the placements), so that no policy's figure hides it."""
    gc.collect()
    gc.freeze()
    try:
        tick = time.perf_counter()
        policy.schedule(queue, cluster, 0.0, running)
        cold = time.perf_counter() - tick
        capped = getattr(policy, "last_status", 0) == 1
        samples = min(SWEEP_MAX_SAMPLES, max(SWEEP_MIN_SAMPLES, int(budget_s / max(cold, 1e-6))))
        wall, cpu = [], []
        for _ in range(samples):
            gc.collect()
            tick, tick_cpu = time.perf_counter(), time.process_time()
            policy.schedule(queue, cluster, 0.0, running)
            wall.append(time.perf_counter() - tick)
            cpu.append(time.process_time() - tick_cpu)
            capped = capped or getattr(policy, "last_status", 0) == 1
        reads = []
        for _ in range(min(RECORD_READ_CALLS, samples)):
            answer = policy.schedule(queue, cluster, 0.0, running)
            gc.collect()
            tick_cpu = time.process_time()
            for placement in answer:
                if placement.decision is not None:
                    placement.decision.alternatives  # noqa: B018 (the read is what is timed)
            reads.append(time.process_time() - tick_cpu)
    finally:
        gc.unfreeze()
    wall.sort()
    cpu.sort()
    return {"cold_s": cold, "p50_s": percentile(wall, 0.5), "p99_s": percentile(wall, 0.99),
            "max_s": wall[-1], "cpu_p50_s": percentile(cpu, 0.5),
            "cpu_p99_s": percentile(cpu, 0.99), "samples": len(wall), "time_capped": capped,
            "records_read_cpu_s": statistics.median(reads)}


def sweep_groups(gpus: int) -> list[NodeGroup]:
    """frenzy-288's node groups scaled to about `gpus` GPUs."""
    return scale_groups(load_cluster_file(CLUSTERS["frenzy-288"]), gpus / 288)


def sweep_inputs(trace: list, gpus: int, queued: int, rng: random.Random
                 ) -> tuple[list[QueuedJob], ClusterView, list[RunningJob]]:
    """A sweep point's input: `queued` trace jobs on a `gpus`-GPU cluster whose GPUs are
    half busy (the same draws from `rng` as every run of the sweep)."""
    groups = sweep_groups(gpus)
    cluster = build_cluster(groups)
    running: list[RunningJob] = []
    for node in cluster.nodes.values():  # half the GPUs busy, each busy node with one job
        busy = node.free_gpus[: rng.randint(0, node.total_gpus)]
        if busy:
            node.free_gpus = node.free_gpus[len(busy):]
            option = _any_option(node.gpu_type, len(busy))
            running.append(RunningJob(f"r-{node.node_id}", option,
                                      ((node.node_id, tuple(busy)),), 0.0,
                                      rng.uniform(10.0, 1e5), (option,), submit_time_s=-1e4))
    start = rng.randrange(0, len(trace) - queued)
    jobs = prepare_jobs(trace[start:start + queued], groups, seed=rng.randrange(1 << 30))
    queue = [QueuedJob(j.job_id, -rng.uniform(0, 1e4), j.options, j.deadline_s) for j in jobs]
    return queue, cluster, running


def sweep_point(trace: list, gpus: int, queued: int, policies: list[str],
                rng: random.Random, per_event: bool = True) -> dict[str, Any]:
    """Time decisions with `queued` jobs on a `gpus`-GPU cluster whose GPUs are half busy:
    the batch measurement (`time_decisions`, the input as it is) and, under `per_event`, the
    per-event one (`time_events`, the steady state after filling it), whose events come from
    their own rng, so the batch inputs of later points stay the draws they always were."""
    queue, cluster, running = sweep_inputs(trace, gpus, queued, rng)
    point: dict[str, Any] = {"gpus": sum(n.total_gpus for n in cluster.nodes.values()),
                             "queued": queued, "policies": {}}
    for name in policies:
        timing = point["policies"][name] = time_decisions(sweep_policy(name), queue, cluster,
                                                          running, SWEEP_BUDGET_S)
        console.log(f"sweep {gpus} GPUs x {queued} jobs {name}: p50 {timing['p50_s'] * 1e3:.2f} ms"
                    f" p99 {timing['p99_s'] * 1e3:.2f} ms (CPU {timing['cpu_p50_s'] * 1e3:.2f} / "
                    f"{timing['cpu_p99_s'] * 1e3:.2f} ms; {timing['samples']} samples; "
                    f"reading the records {timing['records_read_cpu_s'] * 1e3:.2f} ms CPU)"
                    + (" (time cap hit)" if timing["time_capped"] else ""))
    if "sia" in point["policies"] and "has" in point["policies"]:
        point["sia_over_has"] = sia_over_has(point["policies"]["sia"], point["policies"]["has"])
    if per_event:
        point["per_event"] = event_point(trace, queue, cluster, running, policies,
                                         sweep_groups(gpus), random.Random(f"events:{gpus}:{queued}"))
    return point


@dataclass(frozen=True)
class Event:
    """One change between two decisions of the per-event measurement: at `time_s`, a running
    job ends (`ends`: its id) or a job arrives (`arrives`)."""

    time_s: float
    ends: str = ""
    arrives: QueuedJob | None = None

    @property
    def label(self) -> str:
        return f"end {self.ends}" if self.ends else f"arrive {self.arrives.job_id}"


@dataclass
class EventState:
    """What the per-event harness carries from one decision to the next: the queue and the
    running jobs by id (the same objects from call to call, as the simulator keeps them), the
    cluster, and every job's full option menu (a reshape picks from it)."""

    queue: dict[str, QueuedJob]
    running: dict[str, RunningJob]
    cluster: ClusterView
    menus: dict[str, tuple]

    @staticmethod
    def of(queue: list[QueuedJob], cluster: ClusterView, running: list[RunningJob]
           ) -> "EventState":
        """A private copy of a sweep point's input (the batch measurement's objects stay as
        they are)."""
        state = EventState({}, {r.job_id: r for r in running}, cluster.copy(),
                           {r.job_id: tuple(r.options) for r in running})
        for job in queue:
            state.enqueue(job)
        return state

    def enqueue(self, job: QueuedJob) -> None:
        self.queue[job.job_id] = job
        self.menus[job.job_id] = tuple(job.options)

    def happen(self, event: Event) -> None:
        """Apply one event: an ending job frees its GPUs (or, if the policy had preempted it
        back to the queue, leaves the queue); an arriving job joins the queue."""
        if event.arrives is not None:
            self.enqueue(event.arrives)
        elif event.ends in self.running:
            self.cluster.give_back(self.running.pop(event.ends).assignments)
        else:
            del self.queue[event.ends]

    def apply(self, actions: list[Placement], now_s: float) -> int:
        """Execute a policy's answer as the simulator does (every release first, then the
        takes, which raise on a GPU that is not free); no launch or restart overheads (the
        harness needs a plausible state, not JCTs). Jobs end only by events here, so a
        running job may outlive its predicted end (as prediction error makes jobs do): a
        moved or preempted one keeps at least MIN_LEFT of its work, never a 0 s option.
        Returns the jobs placed."""
        moved: dict[str, RunningJob] = {}  # the reshaped jobs as they ran before
        for action in actions:
            if action.kind == PLACE:
                continue
            job = moved[action.job_id] = self.running.pop(action.job_id)
            self.cluster.give_back(job.assignments)
            if action.kind == PREEMPT:
                left = max(MIN_LEFT, job.remaining_fraction(now_s))
                self.queue[job.job_id] = QueuedJob(
                    job.job_id, job.submit_time_s,
                    tuple(replace(o, duration_s=o.duration_s * left) for o in job.options),
                    job.deadline_s, 0, left)
        placed = 0
        for action in actions:
            if action.kind == PREEMPT:
                continue
            self.cluster.take(action.assignments)
            option = action.option
            if action.kind == PLACE:
                job = self.queue.pop(action.job_id)
                left, submit_s, deadline_s, restarts = job.remaining_fraction, \
                    job.submit_time_s, job.deadline_s, 0
                placed += 1
            else:  # a reshape's option is from the full menu: its duration is for all the work
                old = moved[action.job_id]
                left = max(MIN_LEFT, old.remaining_fraction(now_s))
                option = replace(option, duration_s=option.duration_s * left)
                submit_s, deadline_s, restarts = old.submit_time_s, old.deadline_s, \
                    old.restarts + 1
            self.running[action.job_id] = RunningJob(
                action.job_id, option, action.assignments, now_s, now_s + option.duration_s,
                self.menus[action.job_id], left, submit_time_s=submit_s, deadline_s=deadline_s,
                restarts=restarts)
        return placed

    def free_gpus(self) -> int:
        return sum(n.num_free for n in self.cluster.nodes.values())


def draw_events(trace: list, queue: list[QueuedJob], running: list[RunningJob], groups: list,
                rng: random.Random, top_up_jobs: int, count: int = EVENT_COUNT
                ) -> tuple[list[Event], list[QueuedJob]]:
    """A sweep point's events and the jobs that keep its queue at its length while the
    policy fills the cluster; drawn once, so every policy meets the same ones.

    Each event comes 1-60 s after the previous one and is, at even odds, the end of one of
    the input's running jobs (every policy has those, wherever it moved them), each at most
    once, in an order drawn here; or the arrival of a trace job outside the queue. When the
    input's running jobs are all ended, the rest are arrivals."""
    queued_ids = {job.job_id for job in queue}
    needed = count + top_up_jobs
    start = rng.randrange(0, len(trace) - needed - len(queue))
    fresh = [t for t in trace[start:start + needed + len(queue)] if t.job_id not in queued_ids]
    jobs = prepare_jobs(fresh[:needed], groups, seed=rng.randrange(1 << 30))
    top_up = [QueuedJob(j.job_id, -rng.uniform(0, 1e4), j.options, j.deadline_s)
              for j in jobs[count:]]
    arrivals = iter(jobs[:count])
    ends = [r.job_id for r in running]
    rng.shuffle(ends)
    events, time_s = [], 0.0
    for _ in range(count):
        time_s += rng.uniform(1.0, 60.0)
        if ends and rng.random() < 0.5:
            events.append(Event(time_s, ends=ends.pop()))
        else:
            job = next(arrivals)
            events.append(Event(time_s, arrives=QueuedJob(job.job_id, time_s, job.options,
                                                          job.deadline_s)))
    return events, top_up


def fill(policy: Any, state: EventState, top_up: list[QueuedJob]) -> tuple[list[float], bool]:
    """The per-event harness's fill (`time_events`): the policy decides on the state at time 0
    and its answer is applied; the queue is topped up to its length from `top_up`, and again,
    until a decision places nothing or after FILL_MAX_CALLS. Returns each call's wall seconds
    and whether a call hit the policy's time cap."""
    queued = len(state.queue)
    spare = iter(top_up)
    fill_s: list[float] = []
    capped = False
    for _ in range(FILL_MAX_CALLS):
        tick = time.perf_counter()
        actions = policy.schedule(list(state.queue.values()), state.cluster, 0.0,
                                  list(state.running.values()))
        fill_s.append(time.perf_counter() - tick)
        capped = capped or getattr(policy, "last_status", 0) == 1
        placed = state.apply(actions, 0.0)
        for job in itertools.islice(spare, max(0, queued - len(state.queue))):
            state.enqueue(job)
        if not placed:
            break
    return fill_s, capped


def time_events(policy: Any, state: EventState, events: list[Event], top_up: list[QueuedJob],
                budget_s: float) -> dict[str, Any]:
    """The per-event harness, the same for every policy: the steady state of a sweep point.

    Fill: the policy decides on the point's input (at time 0) and its answer is applied; the
    queue is topped up to its length from `top_up` (the same jobs, in the same order, for
    every policy), and again, until a decision places nothing or after FILL_MAX_CALLS: the
    cluster is then as full as the policy leaves it. The first of these calls is the cold
    one (reported apart). Then each timed call follows ONE event and gets the state that the
    earlier events and the policy's own answers left; the events are timed in order, as
    many as `budget_s` allows (at least SWEEP_MIN_SAMPLES). Timing as `time_decisions`:
    the state is gc-frozen after the fill, garbage collected before each call, wall clock
    and process CPU time per call."""
    fill_s, capped = fill(policy, state, top_up)
    filled = {"fill_calls": len(fill_s), "fill_s": fill_s, "free_gpus_after_fill":
              state.free_gpus(), "running_after_fill": len(state.running)}
    wall, cpu, timed, placed_total = [], [], [], 0
    gc.collect()
    gc.freeze()
    try:
        for event in events:
            if len(wall) >= SWEEP_MIN_SAMPLES and sum(wall) >= budget_s:
                break
            state.happen(event)
            queue, running = list(state.queue.values()), list(state.running.values())
            gc.collect()
            tick, tick_cpu = time.perf_counter(), time.process_time()
            actions = policy.schedule(queue, state.cluster, event.time_s, running)
            wall.append(time.perf_counter() - tick)
            cpu.append(time.process_time() - tick_cpu)
            capped = capped or getattr(policy, "last_status", 0) == 1
            placed_total += state.apply(actions, event.time_s)
            timed.append(event.label)
    finally:
        gc.unfreeze()
    wall_sorted, cpu_sorted = sorted(wall), sorted(cpu)
    return {"cold_s": fill_s[0], **filled,
            "p50_s": percentile(wall_sorted, 0.5), "p99_s": percentile(wall_sorted, 0.99),
            "max_s": wall_sorted[-1], "cpu_p50_s": percentile(cpu_sorted, 0.5),
            "cpu_p99_s": percentile(cpu_sorted, 0.99), "samples": len(wall),
            "time_capped": capped, "placed_per_event": placed_total / len(wall),
            "queued_at_end": len(state.queue), "free_gpus_at_end": state.free_gpus(),
            "events": timed}


def sweep_policy(name: str) -> Any:
    """A policy as the sweep times it: elastic sia solves its round on every call, and every
    solver-backed policy is capped at SIA_SWEEP_CAP_S."""
    policy = get_policy(name)
    if isinstance(policy, SiaPolicy):  # every timed call solves the round
        policy = SiaPolicy(SiaConfig(time_limit_s=SIA_SWEEP_CAP_S, reuse_unchanged_round=False))
    elif hasattr(policy, "time_limit_s"):
        policy.time_limit_s = SIA_SWEEP_CAP_S
    return policy


def event_point(trace: list, queue: list[QueuedJob], cluster: ClusterView,
                running: list[RunningJob], policies: list[str], groups: list[NodeGroup],
                rng: random.Random, budget_s: float = EVENT_BUDGET_S,
                count: int = EVENT_COUNT) -> dict[str, Any]:
    """The per-event measurement of one sweep point (its batch input and node groups, `rng`
    for the events): every policy gets a private copy of the input, the same top-up jobs and
    the same events."""
    gpus = sum(n.total_gpus for n in cluster.nodes.values())
    events, top_up = draw_events(trace, queue, running, groups, rng,
                                 len(queue) * FILL_MAX_CALLS, count)
    point: dict[str, Any] = {"events_drawn": len(events), "policies": {}}
    for name in policies:
        timing = point["policies"][name] = time_events(
            sweep_policy(name), EventState.of(queue, cluster, running), events, top_up, budget_s)
        console.log(f"per event {gpus} GPUs x {len(queue)} jobs {name}: p50 "
                    f"{timing['p50_s'] * 1e3:.2f} ms p99 {timing['p99_s'] * 1e3:.2f} ms (CPU "
                    f"{timing['cpu_p50_s'] * 1e3:.2f} / {timing['cpu_p99_s'] * 1e3:.2f} ms; "
                    f"{timing['samples']} events; after the fill {timing['free_gpus_after_fill']}"
                    f" GPUs free)" + (" (time cap hit)" if timing["time_capped"] else ""))
    if "sia" in point["policies"] and "has" in point["policies"]:
        point["sia_over_has"] = sia_over_has(point["policies"]["sia"], point["policies"]["has"])
    return point


def sia_over_has(sia: dict[str, Any], has: dict[str, Any]) -> dict[str, float]:
    """Elastic Sia's decision time over has's, wall clock and CPU, p50 and p99."""
    return {key.removesuffix("_s"): sia[key] / has[key]
            for key in ("p50_s", "p99_s", "cpu_p50_s", "cpu_p99_s")}


def _any_option(gpu_type: str, count: int):
    from frenzy.domain import ParallelPlan, PlanOption
    return PlanOption(gpu_type, ParallelPlan(dp=count), 0, 1.0, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench/results/scheduling.json"))
    parser.add_argument("--skip-windows", action="store_true",
                        help="keep the window results already in --out; run the rest")
    parser.add_argument("--only", choices=("windows", "sweep", "whole-trace"),
                        help="run one section; keep the others' results already in --out")
    parser.add_argument("--rerun", default="",
                        help="windows: run only these policies (comma-separated), keep the "
                             "others' window results already in --out")
    args = parser.parse_args()
    sections = {args.only} if args.only else {"windows", "sweep", "whole-trace"}
    if args.skip_windows:
        sections.discard("windows")
    if args.quick and not args.only:
        sections.discard("whole-trace")
    policies = POLICIES + [name + PARITY for name in POLICIES]
    starts = WINDOW_STARTS[:2] if args.quick else WINDOW_STARTS
    config = SimConfig.realistic()
    trace = load_trace(PHILLY)
    results: dict[str, Any] = {"config": {
        "trace": str(PHILLY), "window_jobs": WINDOW_JOBS, "window_starts": list(starts),
        "loads": list(LOADS), "policies": policies, "seed": 0,
        "realism": {"launch_overhead_s": config.launch_overhead_s,
                    "restart_overhead_s": "per model size (25-250 s)",
                    "duration_error_sigma": config.duration_error_sigma,
                    "checkpoint_interval_s": config.checkpoint_interval_s},
        "machine": "2 shared CPU cores; other engineers' jobs running",
        "build": native.build_name()}, "clusters": {}}
    if sections != {"windows", "sweep", "whole-trace"} and Path(args.out).exists():
        saved = json.loads(Path(args.out).read_text())
        for key in ("clusters", "overhead_sweep", "whole_trace", "measured"):
            if key in saved:
                results[key] = saved[key]
        for runs in results["clusters"].values():  # results saved before the curves were dropped
            for setting in runs.values():
                for window in setting["windows"]:
                    for metrics in window["policies"].values():
                        for key in CURVE_KEYS:
                            metrics.pop(key, None)
    saved_clusters = results["clusters"]
    results["clusters"] = {} if "windows" in sections else saved_clusters
    rerun = [name for name in args.rerun.split(",") if name]
    # Which code measured what, when: one entry per section run (bench/scheduling_report.py
    # prints the latest under each table), kept across partial runs
    results.setdefault("measured", []).extend(
        {"section": section, "utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
         "commit": commit_of(ROOT), "build": native.build_name(),
         **({"policies": rerun} if section == "windows" and rerun else {})}
        for section in sorted(sections))
    for cluster_name, path in CLUSTERS.items() if "windows" in sections else ():
        groups = load_cluster_file(path)
        results["clusters"][cluster_name] = {}
        for load in LOADS:
            label = "trace" if load == 0 else f"load {load}"
            kept = saved_clusters[cluster_name][label]["windows"] if rerun else None
            runs = window_runs(trace, groups, starts, load, rerun or policies, config, kept)
            summary = summarize_cluster(runs, policies)
            results["clusters"][cluster_name][label] = {"windows": runs, "summary": summary}
            Console().print(cluster_table(
                f"{cluster_name}, {label}: {len(starts)} windows x {WINDOW_JOBS} Philly jobs, "
                f"realism defaults; {PARITY} = options capped at the trace GPU count", summary))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(results, indent=1))

    if "sweep" in sections:
        overhead_sweep(trace, results, args.quick)
        Path(args.out).write_text(json.dumps(results, indent=1))
    if "whole-trace" in sections:
        results["whole_trace"] = whole_trace(trace, config)
        # Its figure in its stamp too: the machine moves it by a fifth from run to run, and
        # the report shows every stamped run beside the latest
        results["measured"][-1]["sim_wall_s"] = results["whole_trace"]["sim_wall_s"]
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


def commit_of(root: Path) -> str:
    """The checkout's commit, marked `+dirty` when its code differs from it (results and docs,
    which a run of this benchmark itself rewrites, do not count)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=root).stdout
    commit = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)bench/results", ":(exclude)docs").strip()
    return commit + ("+dirty" if changed else "")


def whole_trace(trace: list, config: SimConfig) -> dict[str, Any]:
    """The whole shared Philly trace on frenzy-288 under has, trace arrivals, realism
    defaults: the simulator's speed. Wall clock and this process's CPU time side by side (on
    a shared machine the wall clock also counts the other processes' turns)."""
    tick = time.perf_counter()
    groups = load_cluster_file(CLUSTERS["frenzy-288"])
    jobs = prepare_jobs(trace, groups, seed=0)
    mapped_s = time.perf_counter() - tick
    tick, tick_cpu = time.perf_counter(), time.process_time()
    metrics = run_policy("has", jobs, groups, config=config)
    wall_s, cpu_s = time.perf_counter() - tick, time.process_time() - tick_cpu  # + summary
    build = native.build_name()
    for key in CURVE_KEYS:
        metrics.pop(key, None)
    Console().print(f"whole Philly trace ({len(jobs)} jobs, {metrics['completed']} completed) on "
                    f"frenzy-288 under has, trace arrivals, realism defaults: simulation "
                    f"{wall_s:.1f} s wall, {cpu_s:.1f} s CPU ({metrics['decisions']} decisions, "
                    f"{metrics['decision_total_s']:.1f} s of them in the policy, wall); "
                    f"+ {mapped_s:.1f} s trace-to-MARP mapping; {build}")
    return {"policy": "has", "cluster": "frenzy-288", "jobs": len(jobs), "build": build,
            "mapping_s": mapped_s, "sim_wall_s": wall_s, "sim_cpu_s": cpu_s,
            "machine": "2 shared CPU cores; other engineers' jobs running", "metrics": metrics}


def overhead_sweep(trace: list, results: dict[str, Any], quick: bool) -> None:
    rng = random.Random(0)
    # `frenzy` follows the public code's per-job node sort (O(nodes log nodes) a job), which
    # takes minutes a call at 10,000 GPUs: the sweep compares has with the Sia variants, fifo
    # and frenzy-narrow (the same pass structure as before)
    sweep_policies = ["fifo", "frenzy-narrow", "sia", "sia-static", "has"]
    grid = [(100, 100), (1000, 500)] if quick else [
        *SWEEP_GRID]
    results["overhead_sweep"] = {
        "sia_time_cap_s": SIA_SWEEP_CAP_S, "budget_s_per_policy": SWEEP_BUDGET_S,
        "samples_bounds": [SWEEP_MIN_SAMPLES, SWEEP_MAX_SAMPLES],
        "harness": "same for every policy: one cold call, then steady-state calls on the same "
                   "input; inputs gc-frozen, gc.collect() before each call; wall clock and "
                   "process CPU time per call; nearest-rank p50/p99; elastic sia re-solves "
                   "queued and running jobs on every call (a round)",
        "per_event_harness": "same for every policy (time_events), under each point's "
                             "'per_event' key: the policy fills a private copy of the point's "
                             "input (its own placements applied, the queue topped up to its "
                             f"length with the same jobs, up to {FILL_MAX_CALLS} calls; the "
                             "first is cold_s), then one decision after each event, on the "
                             "state the earlier events and answers left; the events (a running "
                             "job of the input ends, or a trace job arrives, 1-60 s apart) are "
                             "drawn once per point from their own rng and timed in order, as "
                             f"many as {EVENT_BUDGET_S:.0f} s allow (>= {SWEEP_MIN_SAMPLES}); "
                             "gc and clocks as the batch harness",
        "per_event_budget_s": EVENT_BUDGET_S, "events_per_point": EVENT_COUNT,
        "fill_max_calls": FILL_MAX_CALLS,
        # the build of the scheduler's hot modules every policy ran on (frenzy_scheduler/native.py)
        "build": native.build_name(),
        "points": [sweep_point(trace, g, q, sweep_policies, rng) for g, q in grid]}
    for clock, p50, p99 in (("wall clock", "p50_s", "p99_s"), ("CPU time", "cpu_p50_s", "cpu_p99_s")):
        sweep = Table(title=f"decision time, steady state, {clock} (ms): p50 / p99; sia capped "
                            f"at {SIA_SWEEP_CAP_S:.0f} s per decision; {native.build_name()}")
        sweep.add_column("GPUs x queued")
        for name in sweep_policies:
            sweep.add_column(name, justify="right")
        for column in ("sia / has p50", "sia / has p99"):
            sweep.add_column(column, justify="right")
        for point in results["overhead_sweep"]["points"]:
            timings = point["policies"]
            cells = [f"{timings[n][p50] * 1e3:.2f} / {timings[n][p99] * 1e3:.2f}"
                     + ("*" if timings[n]["time_capped"] else "") for n in sweep_policies]
            ratios = point.get("sia_over_has", {})
            prefix = "cpu_" if clock == "CPU time" else ""
            sweep.add_row(f"{point['gpus']} x {point['queued']}", *cells,
                          *(f"{ratios[prefix + q]:.0f}x" if ratios else "-" for q in ("p50", "p99")))
        Console().print(sweep)
    for clock, p50, p99 in (("wall clock", "p50_s", "p99_s"), ("CPU time", "cpu_p50_s", "cpu_p99_s")):
        Console().print(event_table(results["overhead_sweep"]["points"], sweep_policies, clock,
                                    p50, p99))


def event_table(points: list[dict[str, Any]], policies: list[str], clock: str, p50: str,
                p99: str) -> Table:
    """The per-event measurement beside the batch one's layout: has and elastic sia first."""
    table = Table(title=f"decision time, ONE event each on the state the policy left (per "
                        f"event), {clock} (ms): p50 / p99 (events timed); sia capped at "
                        f"{SIA_SWEEP_CAP_S:.0f} s per decision")
    table.add_column("GPUs x queued")
    ordered = [n for n in ("has", "sia") if n in policies] + \
        [n for n in policies if n not in ("has", "sia")]
    for name in ordered:
        table.add_column(name, justify="right")
    for column in ("sia / has p50", "sia / has p99", "has GPUs free after fill"):
        table.add_column(column, justify="right")
    prefix = "cpu_" if clock == "CPU time" else ""
    for point in points:
        timings = point["per_event"]["policies"]
        cells = [f"{timings[n][p50] * 1e3:.2f} / {timings[n][p99] * 1e3:.2f} "
                 f"({timings[n]['samples']})" + ("*" if timings[n]["time_capped"] else "")
                 for n in ordered]
        ratios = point["per_event"].get("sia_over_has", {})
        table.add_row(f"{point['gpus']} x {point['queued']}", *cells,
                      *(f"{ratios[prefix + q]:.0f}x" if ratios else "-" for q in ("p50", "p99")),
                      str(timings["has"]["free_gpus_after_fill"]) if "has" in timings else "-")
    return table


if __name__ == "__main__":
    main()
