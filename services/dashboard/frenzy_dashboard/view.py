"""The dashboard's picture of the cluster, folded from the event stream (pure; no I/O).

`DashboardState.apply` takes one envelope from the topics the dashboard reads and says which
views changed; the `*_view` functions turn the state into plain dicts for the templates, filtered
for one principal (a user sees their tenant's jobs, an admin sees all).

Which GPU a job holds comes from the orchestrator's job records (Job.assignments of live jobs):
they are the authority, while heartbeats say only what an agent saw a moment ago. Utilisation over
time is sampled at every GpuAvailabilityChanged, at the time the orchestrator produced it, so a
restarted dashboard that replays the topic draws the same history.
"""
from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from frenzy.convert import describe_plan
from frenzy.joblogs import LineSplitter, LogCursor
from frenzy.jobstates import HOLDING, TERMINAL, WAITING
from frenzy.v1 import events_pb2, types_pb2
from frenzy_predictor.error_table import Measurement, aggregate, measurement_of, split_key, summary

STATE = types_pb2.JobState.Name
GIB = 1024**3
NODE_STATE = {types_pb2.NODE_READY: "ready", types_pb2.NODE_LOST: "lost"}
CURVE_POINTS = 2000        # progress points kept per job (loss and throughput curve)
UTILISATION_SAMPLES = 2000  # cluster-wide samples kept for the utilisation chart
HIDDEN_JOB = "another tenant"
OPTIONS_SHOWN = 12  # MARP often offers 100+ options; the rest fold away
LOG_TAIL_LINES = 40  # the job page's log tail; `frenzy logs` has the rest
LOG_LINE_CHARS = 300  # a longer line (a progress bar, a tensor dump) is cut here


@dataclass(frozen=True)
class Principal:
    """Who is looking: a tenant, and a role ("admin" sees every tenant)."""

    tenant: str
    role: str = "user"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_see(self, tenant: str) -> bool:
        return self.is_admin or tenant == self.tenant


@dataclass
class NodeView:
    node_id: str
    gpu_type: str = ""
    gpus_total: int = 0
    free_gpus: frozenset[int] = frozenset()
    state: str = "unknown"  # until the orchestrator says ready or lost
    memory_used_bytes: dict[int, int] = field(default_factory=dict)  # from heartbeats
    heartbeat_jobs: dict[int, str] = field(default_factory=dict)  # GPU index -> job, agent's view


@dataclass
class CurvePoint:
    t_s: float
    step: int
    loss: float
    tokens: int


@dataclass
class JobView:
    job: types_pb2.Job
    options: list[types_pb2.PlanOption] = field(default_factory=list)
    plan_reason: str = ""
    decision: types_pb2.DecisionRecord | None = None
    curve: deque[CurvePoint] = field(default_factory=lambda: deque(maxlen=CURVE_POINTS))
    checkpoints: list[tuple[float, int]] = field(default_factory=list)  # (time, step)
    history: list[tuple[float, str, str]] = field(default_factory=list)  # (time, state, reason)
    log_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    log_cursor: LogCursor = field(default_factory=LogCursor)
    log_lines: LineSplitter = field(default_factory=LineSplitter)


def _seconds(ts) -> float:
    return ts.ToNanoseconds() / 1e9 if ts.seconds or ts.nanos else 0.0


class DashboardState:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.jobs: dict[str, JobView] = {}
        # measured against predicted peak memory per attempt ("job#attempt"), the error record's input
        self.measurements: dict[str, Measurement] = {}
        # (time, {gpu_type: (allocated, total)})
        self.utilisation: deque[tuple[float, dict[str, tuple[int, int]]]] = deque(
            maxlen=UTILISATION_SAMPLES)

    def _job(self, job_id: str) -> JobView:
        view = self.jobs.get(job_id)
        if view is None:
            view = self.jobs[job_id] = JobView(types_pb2.Job(id=job_id))
        return view

    def apply(self, env: events_pb2.Envelope) -> set[str]:
        """Fold one event in; the names of the views it changed ("cluster", "jobs", "job/<id>")."""
        kind = env.WhichOneof("payload")
        t_s = _seconds(env.produced_at)
        if kind == "job_status_changed":
            return self._on_status(env.job_status_changed, t_s)
        if kind == "job_planned":
            planned = env.job_planned
            view = self._job(planned.job_id)
            if planned.attempt >= view.job.attempt:
                view.options = list(planned.options)
                view.plan_reason = planned.reason
            return {"jobs", f"job/{planned.job_id}"}
        if kind == "job_placed":
            placed = env.job_placed
            if placed.HasField("decision"):
                self._job(placed.job_id).decision = placed.decision
            return {f"job/{placed.job_id}"}
        if kind == "gpu_availability_changed":
            return self._on_availability(env.gpu_availability_changed, t_s)
        if kind == "log_chunk":
            return self._on_log(env.log_chunk)
        if kind == "node_heartbeat":
            return self._on_heartbeat(env.node_heartbeat)
        return set()

    def _on_status(self, status: events_pb2.JobStatusChanged, t_s: float) -> set[str]:
        view = self._job(status.job_id)
        changed = {f"job/{status.job_id}"}
        if status.source == events_pb2.AGENT:
            p = status.progress
            if status.state == types_pb2.RUNNING and p.step and (
                    not view.curve or p.step != view.curve[-1].step):
                view.curve.append(CurvePoint(t_s, p.step, p.loss, p.tokens))
            if status.HasField("checkpoint_step") and (
                    not view.checkpoints or view.checkpoints[-1][1] != status.checkpoint_step):
                view.checkpoints.append((t_s, status.checkpoint_step))
            return changed
        if not status.HasField("job") or status.job.version < view.job.version:
            return changed  # an older record replayed after a newer one
        measurement = measurement_of(status)
        if measurement is not None:
            self.measurements[measurement.measurement_id] = measurement
        if status.job.attempt > view.job.attempt:
            view.curve.clear()  # a new attempt starts from step 0 (or its checkpoint)
        view.job = status.job
        if status.job.HasField("decision"):
            view.decision = status.job.decision
        if status.job.HasField("checkpoint_step") and (
                not view.checkpoints or view.checkpoints[-1][1] != status.job.checkpoint_step):
            view.checkpoints.append((t_s, status.job.checkpoint_step))
        if not view.history or view.history[-1][1:] != (STATE(status.state), status.reason):
            view.history.append((t_s, STATE(status.state), status.reason))
        return changed | {"jobs", "cluster", "memory"}

    def _on_log(self, chunk: types_pb2.LogChunk) -> set[str]:
        view = self._job(chunk.job_id)
        fresh = view.log_cursor.fresh(chunk.attempt, chunk.rank, chunk.offset, chunk.data)
        lines = view.log_lines.feed(chunk.rank, fresh)
        view.log_tail.extend(f"[rank {chunk.rank}] {line[:LOG_LINE_CHARS]}" for line in lines)
        return {f"job/{chunk.job_id}"} if lines else set()

    def _on_availability(self, event: events_pb2.GpuAvailabilityChanged, t_s: float) -> set[str]:
        node = self.nodes.setdefault(event.node_id, NodeView(event.node_id))
        node.gpu_type = event.gpu_type or node.gpu_type
        node.gpus_total = event.gpus_total or node.gpus_total
        node.free_gpus = frozenset(event.free_gpu_indices)
        node.state = NODE_STATE.get(event.node_state, "unknown")
        totals: dict[str, tuple[int, int]] = {}
        for n in self.nodes.values():
            allocated, total = totals.get(n.gpu_type, (0, 0))
            busy = 0 if n.state == "lost" else n.gpus_total - len(n.free_gpus)
            totals[n.gpu_type] = (allocated + busy, total + n.gpus_total)
        if self.utilisation and self.utilisation[-1][0] >= t_s:
            t_s = self.utilisation[-1][0]  # keep the series ordered; replace the same instant
            self.utilisation.pop()
        self.utilisation.append((t_s, totals))
        return {"cluster"}

    def _on_heartbeat(self, beat: events_pb2.NodeHeartbeat) -> set[str]:
        node = self.nodes.setdefault(beat.node_id, NodeView(beat.node_id))
        if beat.gpus:
            node.gpu_type = node.gpu_type or beat.gpus[0].gpu_type
            node.gpus_total = node.gpus_total or len(beat.gpus)
            if node.state == "unknown" and not self.utilisation:
                node.free_gpus = frozenset(g.index for g in beat.gpus if not g.job_id)
        used = {g.index: g.memory_used_bytes for g in beat.gpus}
        jobs = {g.index: g.job_id for g in beat.gpus if g.job_id}
        if used == node.memory_used_bytes and jobs == node.heartbeat_jobs:
            return set()
        node.memory_used_bytes, node.heartbeat_jobs = used, jobs
        return {"cluster"}

    def gpu_capacity(self) -> dict[str, int]:
        """GPUs per type over the nodes that are not lost."""
        capacity: dict[str, int] = {}
        for n in self.nodes.values():
            if n.gpu_type and n.state != "lost":
                capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.gpus_total
        return capacity

    def gpu_holders(self) -> dict[tuple[str, int], str]:
        """(node, GPU index) -> job id, from the live jobs' assignments."""
        holders: dict[tuple[str, int], str] = {}
        for view in self.jobs.values():
            if view.job.state in HOLDING:
                for a in view.job.assignments:
                    for gpu in a.gpu_indices:
                        holders[(a.node_id, gpu)] = view.job.id
        return holders


# ---- views for the templates -------------------------------------------------------------

def job_colour(job_id: str) -> str:
    """A stable colour per job, so one job's GPUs read as one block across nodes."""
    hue = int(hashlib.sha1(job_id.encode()).hexdigest()[:4], 16) % 360
    return f"hsl({hue} 65% 55%)"


def gpus_text(option: types_pb2.PlanOption) -> str:
    return f"{option.num_gpus}×{option.gpu_type}" if option.gpu_type else "-"


def gib(value_bytes: int) -> str:
    return f"{value_bytes / GIB:.1f} GiB" if value_bytes else "-"


def duration_text(seconds: float) -> str:
    if seconds < 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cluster_view(state: DashboardState, who: Principal) -> dict[str, Any]:
    holders = state.gpu_holders()
    tenants = {v.job.id: v.job.tenant for v in state.jobs.values()}
    groups: dict[str, dict[str, Any]] = {}
    for node in sorted(state.nodes.values(), key=lambda n: (n.gpu_type, n.node_id)):
        group = groups.setdefault(node.gpu_type or "unknown", {
            "gpu_type": node.gpu_type or "unknown", "nodes": [], "allocated": 0, "total": 0})
        gpus = []
        for index in range(node.gpus_total):
            job_id = holders.get((node.node_id, index)) or (
                "" if index in node.free_gpus else node.heartbeat_jobs.get(index, ""))
            busy = bool(job_id) or index not in node.free_gpus
            visible = bool(job_id) and who.may_see(tenants.get(job_id, ""))
            gpus.append({"index": index, "job_id": job_id if visible else "",
                         "label": job_id if visible else (HIDDEN_JOB if job_id else ("busy" if busy else "free")),
                         "busy": busy,
                         "colour": job_colour(job_id) if visible else ("#9aa0a6" if busy else ""),
                         "memory_used": gib(node.memory_used_bytes.get(index, 0))})
            group["allocated"] += busy and node.state != "lost"
        group["total"] += node.gpus_total
        group["nodes"].append({"node_id": node.node_id, "state": node.state, "gpus": gpus})
    return {"groups": list(groups.values())}


def utilisation_series(state: DashboardState) -> dict[str, Any]:
    """uPlot's column layout: [times, one series per GPU type] in percent of that type's GPUs."""
    types = sorted({t for _, totals in state.utilisation for t in totals})
    times = [t for t, _ in state.utilisation]
    series = []
    for gpu_type in types:
        column = []
        for _, totals in state.utilisation:
            allocated, total = totals.get(gpu_type, (0, 0))
            column.append(round(100 * allocated / total, 1) if total else None)
        series.append(column)
    return {"labels": types, "data": [times, *series]}


def wait_reason(view: JobView, now_s: float, capacity: dict[str, int] | None = None) -> str:
    """Why a job is not running yet, in words a user reads at a glance. capacity: GPUs per type
    in this cluster (MARP ranks options over every catalog type and any count)."""
    job = view.job
    if job.state == types_pb2.SUBMITTED:
        return job.reason if job.reason.startswith("OOM") else "waiting for MARP's plan"
    decision = view.decision
    if decision is not None and not decision.HasField("chosen") and decision.reason:
        text = decision.reason
        starts = [a.estimated_start_s for a in decision.alternatives if a.estimated_start_s > 0]
        if starts:
            left_s = min(starts) - (now_s - _seconds(decision.decided_at))
            text += f"; expected start in {duration_text(max(left_s, 0))}"
        return text
    reason = job.reason or "waiting for GPUs"
    here = [o for o in view.options if capacity is None or o.num_gpus <= capacity.get(o.gpu_type, 0)]
    if here:
        reason += f" (MARP's best option that fits this cluster: {gpus_text(here[0])})"
    elif view.options:
        reason += " (none of MARP's options fits this cluster's GPUs)"
    return reason


def job_row(view: JobView, now_s: float, capacity: dict[str, int] | None = None) -> dict[str, Any]:
    job = view.job
    submitted_s = _seconds(job.submitted_at)
    started_s = _seconds(job.started_at) or _seconds(job.placed_at)
    waited_s = ((started_s or (now_s if job.state not in TERMINAL else _seconds(job.finished_at)))
                - submitted_s) if submitted_s else -1
    return {
        "id": job.id, "name": job.spec.name, "model": job.spec.model, "tenant": job.tenant or "-",
        "state": STATE(job.state), "gpus": gpus_text(job.option),
        "plan": describe_plan(job.option.plan) if job.option.gpu_type else "-",
        "progress_pct": round(100 * job.progress.fraction),
        "loss": f"{job.progress.loss:.3f}" if job.progress.step else "",
        "waited": duration_text(waited_s) if waited_s >= 0 else "-",
        "why": wait_reason(view, now_s, capacity) if job.state in WAITING else job.reason,
        "colour": job_colour(job.id),
    }


def jobs_view(state: DashboardState, who: Principal, now_s: float) -> dict[str, Any]:
    visible = [v for v in state.jobs.values() if v.job.spec.model and who.may_see(v.job.tenant)]
    visible.sort(key=lambda v: (_seconds(v.job.submitted_at), v.job.id), reverse=True)
    rows = [job_row(v, now_s, state.gpu_capacity()) for v in visible]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"rows": rows, "waiting": [r for r in rows if r["state"] in {STATE(s) for s in WAITING}],
            "counts": counts}


def option_row(option: types_pb2.PlanOption, chosen: types_pb2.PlanOption | None) -> dict[str, Any]:
    gpu_hours = option.num_gpus * option.duration_s / 3600
    is_chosen = chosen is not None and chosen.gpu_type == option.gpu_type and (
        chosen.num_gpus == option.num_gpus and chosen.plan == option.plan)
    return {"rank": option.rank, "gpus": gpus_text(option), "gpu_type": option.gpu_type,
            "num_gpus": option.num_gpus, "plan": describe_plan(option.plan),
            "memory": gib(option.peak_bytes_per_gpu), "step_time": f"{option.step_time_s:.3f} s",
            "duration": duration_text(option.duration_s), "gpu_hours": f"{gpu_hours:.2f}",
            "chosen": is_chosen}


def decision_view(decision: types_pb2.DecisionRecord | None) -> dict[str, Any] | None:
    if decision is None:
        return None
    chosen = decision.chosen if decision.HasField("chosen") else None
    return {"policy": decision.policy or "-", "reason": decision.reason,
            "chosen": option_row(chosen, chosen) if chosen is not None else None,
            "decision_time": f"{decision.decision_time_s * 1000:.1f} ms",
            "alternatives": [{**option_row(a.option, chosen), "verdict": a.verdict,
                              "start": duration_text(a.estimated_start_s),
                              "completion": duration_text(a.estimated_completion_s)}
                             for a in decision.alternatives]}


def job_view(state: DashboardState, job_id: str, who: Principal, now_s: float) -> dict[str, Any] | None:
    """None when the job is unknown or belongs to another tenant (the page answers 404)."""
    view = state.jobs.get(job_id)
    if view is None or not view.job.spec.model or not who.may_see(view.job.tenant):
        return None
    job = view.job
    chosen = job.option if job.option.gpu_type else None
    measured = job.progress.peak_memory_bytes
    predicted = job.option.peak_bytes_per_gpu
    options = [option_row(o, chosen) for o in view.options]  # the chosen one always in sight
    return {
        "row": job_row(view, now_s, state.gpu_capacity()),
        "options": options[:OPTIONS_SHOWN] + [o for o in options[OPTIONS_SHOWN:] if o["chosen"]],
        "more_options": [o for o in options[OPTIONS_SHOWN:] if not o["chosen"]],
        "plan_reason": view.plan_reason,
        "decision": decision_view(view.decision),
        "memory": {"predicted": gib(predicted), "measured": gib(measured),
                   "predicted_allocated": gib(job.option.peak_allocated_bytes),
                   "error": f"{(predicted - measured) / measured:+.1%}" if measured and predicted else "-"},
        "checkpoints": [{"step": step, "resumed": step == job.resumed_from_step} for _, step in view.checkpoints],
        "resumed_from_step": job.resumed_from_step,
        "history": [{"state": s, "reason": r} for _, s, r in view.history],
        "log_tail": list(view.log_tail),
        "assignments": [{"node_id": a.node_id, "gpus": ", ".join(map(str, a.gpu_indices))}
                        for a in job.assignments],
    }


def curve_series(state: DashboardState, job_id: str) -> dict[str, Any]:
    """[step, loss, tokens/s]: the throughput between consecutive progress reports."""
    view = state.jobs.get(job_id)
    points = list(view.curve) if view else []
    steps = [p.step for p in points]
    loss = [p.loss for p in points]
    throughput: list[float | None] = [None]
    for a, b in zip(points, points[1:]):
        dt = b.t_s - a.t_s
        throughput.append(round((b.tokens - a.tokens) / dt) if dt > 0 else None)
    return {"data": [steps, loss, throughput[:len(points)]]}


def memory_view(state: DashboardState, who: Principal) -> dict[str, Any]:
    """MARP's per-GPU memory prediction against each finished job's measured peak, folded with
    the predictor's own error-record functions (frenzy_predictor.error_table)."""
    measurements = [m for m in state.measurements.values()
                    if m.job_id in state.jobs and who.may_see(state.jobs[m.job_id].job.tenant)]
    rows = []
    for key, record in sorted(aggregate(measurements).items()):
        model, gpu_type = split_key(key)
        s = summary(record)
        rows.append({"model": model, "gpu_type": gpu_type, "jobs": s["jobs"],
                     "mean_abs_error": f"{s['mean_abs_error']:.1%}",
                     "worst_under": f"{s['worst_under_prediction']:+.1%}"})
    points = sorted((m.measured_bytes / GIB, m.predicted_bytes / GIB) for m in measurements)
    return {"rows": rows, "points": [[p[0] for p in points], [p[1] for p in points]],
            "jobs": [{"job_id": m.job_id, "model": m.model, "gpu_type": m.gpu_type,
                      "predicted": gib(m.predicted_bytes), "measured": gib(m.measured_bytes),
                      "error": f"{m.error:+.1%}", "outcome": m.outcome} for m in measurements]}
