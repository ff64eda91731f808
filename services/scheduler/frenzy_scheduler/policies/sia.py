"""Sia (Jayaram Subramanya et al., SOSP'23), elastic, and the earlier static variant.

`sia` follows the artifact's `sia-simulator/sia.py` (siasosp23/artifacts; every element is
mapped in docs/has.md). Every round (60 s) it re-solves *all* active jobs, queued and running:

* configurations: per GPU type, node-shaped GPU counts (within one node, or whole nodes) from
  the job's option menu, up to the type's capacity (`populate_valid_configs`);
* goodput of a configuration = 1 / its predicted duration, normalised so the job's slowest
  configuration has goodput = its GPU count (`_compute_goodputs` + the `min_goodput`
  normalisation: "slowest goodput = num replicas");
* restart damping: a running job's goodput on any configuration other than its current one is
  multiplied by the Pollux re-allocation factor max(age - restarts x penalty, 0) /
  (age + penalty), 1 while age < penalty (`sia_use_pollux_realloc_factor`);
* objective (p = -0.5 < 0, so minimised): sum over chosen (job, config) of goodput^p (rounded
  to 2 decimals, as the artifact's), plus lambda_n (1.1) per unallocated job, plus lambda_a
  (0.01) per changed allocation;
* constraints: at most one configuration per job, per-type GPU totals; a job that is restoring
  is pinned to its configuration (`non_preemptible_jobnames`);
* placement (`alloc_to_placement`): unchanged jobs keep their GPUs; changed and new jobs are
  packed, biggest first.

Solved with scipy's HiGHS `milp` (Sia uses GLPK/CVXPY). A round in which nothing changed since
the last solve (same jobs, same allocations, same pins) reuses that solution: only the age term
of the damping factor moves, by seconds.

`sia-static` is this project's earlier policy, kept as a labelled variant: it places queued
jobs only (never resizes), maximising goodput per GPU over the job's best goodput per GPU.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from frenzy.domain import PlanOption
from frenzy_scheduler.core import (MIGRATE, PLACE, PREEMPT, RESIZE, Alternative, ClusterView,
                                  Decision, Placement, QueuedJob, RunningJob, option_alternatives)
from frenzy_scheduler.placement import Assignments, FreeIndex


@dataclass(frozen=True)
class SiaConfig:
    round_s: float = 60.0  # Sia's scheduling round
    p_fairness: float = -0.5  # sim_config.sia_default_p_val
    lambda_n: float = 1.1  # per unallocated job (sia_default_lambda_n)
    lambda_a: float = 0.01  # per changed allocation (sia_default_lambda_a)
    goodput_clip: float = 3000.0  # sia_goodput_clip_val, on goodput^p
    # goodput^p rounded to this many decimals, as the artifact does (sia.py line 911,
    # `np.round(pup_mat, decimals=2)`): near-equal configurations tie. None: not rounded.
    round_decimals: int | None = 2
    time_limit_s: float = 30.0  # HiGHS wall cap per solve; the incumbent is used when it hits
    mip_rel_gap: float = 1e-4  # sim_config.sia_solver_thresh
    reuse_unchanged_round: bool = True  # off in the decision-time sweep: every call solves


@dataclass
class _Job:
    """One row of the problem: a queued or running job and its configurations."""

    job_id: str
    configs: list[PlanOption]  # fastest option per node-shaped (type, count)
    remaining: float  # fraction of the work left (to report completion estimates)
    running: RunningJob | None = None
    current: int = -1  # index of the running configuration in `configs`; -1: none


def node_shaped(count: int, node_size: int) -> bool:
    """Sia's configurations: up to one node's GPUs, or whole nodes."""
    return count <= node_size or count % node_size == 0


def configurations(options: Sequence[PlanOption], index: FreeIndex) -> list[PlanOption]:
    fastest: dict[tuple[str, int], PlanOption] = {}
    for option in options:
        node = index.node_size.get(option.gpu_type)
        if not node or option.num_gpus > index.capacity[option.gpu_type] or \
                not node_shaped(option.num_gpus, node):
            continue
        key = (option.gpu_type, option.num_gpus)
        if key not in fastest or option.duration_s < fastest[key].duration_s:
            fastest[key] = option
    return sorted(fastest.values(), key=lambda o: (o.gpu_type, o.num_gpus))


class SiaPolicy:
    """Elastic Sia: a 60 s round re-solves every active job (see the module docstring)."""

    name = "sia"
    elastic = True

    def __init__(self, config: SiaConfig = SiaConfig()) -> None:
        self.config = config
        self.round_s = config.round_s
        self.last_status = 0  # scipy milp status of the latest solve (1: time limit reached)
        self.last_solve_s = 0.0
        self._signature: tuple | None = None

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = FreeIndex(cluster)
        if not index.capacity:
            return []
        pinned = [r for r in running if not r.options or r.restoring_until_s > now_s]
        signature = (tuple(sorted(j.job_id for j in queue)),
                     tuple(sorted((r.job_id, r.option.gpu_type, r.num_gpus) for r in running)),
                     tuple(sorted(r.job_id for r in pinned)), tuple(sorted(index.capacity.items())))
        if signature == self._signature and self.config.reuse_unchanged_round:
            return []  # nothing changed since the last solve: its answer stands
        self._signature = signature
        rows = self._rows(queue, running, index, now_s)
        if not rows:
            return []
        capacity = dict(index.free_by_type)  # free GPUs plus those the re-solved jobs hold
        for row in rows:
            if row.running is not None:
                capacity[row.running.option.gpu_type] = capacity.get(
                    row.running.option.gpu_type, 0) + row.running.num_gpus
        chosen = self._solve(rows, index, capacity, now_s)
        return self._actions(rows, chosen, cluster, now_s)

    # -- the problem -------------------------------------------------------------------

    def _rows(self, queue: Sequence[QueuedJob], running: Sequence[RunningJob], index: FreeIndex,
              now_s: float) -> list[_Job]:
        """One row per job, in submission order, queued and running interleaved.

        The order is Sia's: its rows follow its job list, which is the workload's order
        (`cluster.py` 46-64, `sia.py` `optimize_mip` 580-590). It matters only where the
        MILP has ties (e.g. a running job against an identical waiting one), which the
        solver breaks by the order of its variables; with queued jobs first, ours rotated
        identical jobs far more often than Sia does (docs/has.md, the cross-check).
        """
        rows: list[tuple[float, str, _Job]] = []
        for job in queue:
            configs = configurations(job.options, index)
            if configs:
                rows.append((job.submit_time_s, job.job_id,
                             _Job(job.job_id, configs, job.remaining_fraction)))
        for run in running:
            if not run.options:
                continue  # unknown menu (live, before its plan arrived): left as it is
            configs = configurations(run.options, index)
            current = next((i for i, o in enumerate(configs) if o.gpu_type == run.option.gpu_type
                            and o.num_gpus == run.num_gpus), -1)
            if current < 0:  # not a Sia configuration (e.g. placed before): offer it as one
                configs.append(_full(run))
                current = len(configs) - 1
            rows.append((run.submit_time_s, run.job_id,
                         _Job(run.job_id, configs, run.remaining_fraction(now_s), run, current)))
        rows.sort(key=lambda entry: entry[:2])
        return [row for _, _, row in rows]

    def _coefficients(self, row: _Job, now_s: float) -> list[float]:
        """goodput^p per configuration (minimised), with restart damping and lambda_a."""
        cfg = self.config
        slowest = max(row.configs, key=lambda o: (o.duration_s, -o.num_gpus))
        scale = slowest.duration_s * slowest.num_gpus  # slowest config's goodput = its GPUs
        damping = 1.0
        run = row.running
        if run is not None:
            penalty_s = _restart_penalty_s(run)
            age_s = max(0.0, now_s - run.submit_time_s)
            if age_s >= penalty_s:
                damping = max(age_s - run.restarts * penalty_s, 0.0) / (age_s + penalty_s)
        values = []
        for i, option in enumerate(row.configs):
            goodput = scale / option.duration_s
            changed = run is not None and i != row.current
            if changed:
                goodput *= damping
            value = goodput ** cfg.p_fairness if goodput > 0 else cfg.goodput_clip
            if cfg.round_decimals is not None:
                value = round(value, cfg.round_decimals)
            value = min(cfg.goodput_clip, value)
            values.append(value + (cfg.lambda_a if changed else 0.0))
        return values

    def _solve(self, rows: list[_Job], index: FreeIndex, capacity: dict[str, int],
               now_s: float) -> dict[int, int]:
        """row -> chosen configuration index (rows left out are unallocated)."""
        started = time.perf_counter()
        types = sorted(index.capacity)
        type_row = {t: len(rows) + i for i, t in enumerate(types)}
        columns: list[tuple[int, int]] = []
        cost: list[float] = []
        r_idx, c_idx, vals = [], [], []
        lower_job = np.zeros(len(rows))
        for j, row in enumerate(rows):
            pinned = row.running is not None and row.running.restoring_until_s > now_s
            coefficients = self._coefficients(row, now_s)
            for i, option in enumerate(row.configs):
                if pinned and i != row.current:
                    continue
                k = len(columns)
                columns.append((j, i))
                cost.append(coefficients[i] - self.config.lambda_n)  # lambda_n x (J - allocs)
                r_idx += [j, type_row[option.gpu_type]]
                c_idx += [k, k]
                vals += [1.0, float(option.num_gpus)]
            if pinned:
                lower_job[j] = 1.0
        matrix = coo_matrix((vals, (r_idx, c_idx)), shape=(len(rows) + len(types), len(columns)))
        upper = np.concatenate([np.ones(len(rows)), [float(capacity.get(t, 0)) for t in types]])
        lower = np.concatenate([lower_job, np.full(len(types), -np.inf)])
        result = milp(np.array(cost), integrality=np.ones(len(columns)), bounds=Bounds(0, 1),
                      constraints=LinearConstraint(matrix.tocsr(), lower, upper),
                      options={"time_limit": self.config.time_limit_s,
                               "mip_rel_gap": self.config.mip_rel_gap})
        self.last_status = result.status
        self.last_solve_s = time.perf_counter() - started
        if result.x is None:  # infeasible (pins over capacity after a node loss): keep all
            return {j: row.current for j, row in enumerate(rows) if row.running is not None}
        return {columns[k][0]: columns[k][1] for k in range(len(columns)) if result.x[k] > 0.5}

    # -- from the solution to actions ------------------------------------------------------

    def _actions(self, rows: list[_Job], chosen: dict[int, int], cluster: ClusterView,
                 now_s: float) -> list[Placement]:
        changed = [j for j, row in enumerate(rows)
                   if row.running is not None and chosen.get(j, -1) != row.current]
        released = cluster.copy()
        for j in changed:
            released.give_back(rows[j].running.assignments)
        index = FreeIndex(released)
        actions: list[Placement] = []
        # running jobs that change first (they held GPUs), then new ones; biggest first
        order = sorted(changed, key=lambda j: -_gpus(rows[j], chosen.get(j, -1)))
        order += sorted((j for j, row in enumerate(rows) if row.running is None and j in chosen),
                        key=lambda j: -_gpus(rows[j], chosen[j]))
        preempt = [j for j in changed if chosen.get(j, -1) < 0]
        for j in order:
            row = rows[j]
            config = chosen.get(j, -1)
            if config < 0:
                continue
            option = row.configs[config]
            assignments = index.best_fit(option.gpu_type, option.num_gpus, option.plan.tp)
            if assignments is None:
                if row.running is not None:  # could not pack the new shape: keep the old one
                    if _can_keep(index, row.running.assignments):
                        index.take(row.running.assignments)
                    else:
                        preempt.append(j)
                continue
            index.take(assignments)
            kind = PLACE if row.running is None else (
                RESIZE if option.gpu_type == row.running.option.gpu_type else MIGRATE)
            actions.append(Placement(row.job_id, option, assignments, kind,
                                     self._decision(row, option, now_s)))
        for j in preempt:
            actions.append(Placement(rows[j].job_id, rows[j].running.option, (), PREEMPT, Decision(
                self.name, "Sia round: no allocation this round (lambda_n < its goodput cost)")))
        return actions

    def _decision(self, row: _Job, option: PlanOption, now_s: float) -> Decision:
        alternatives = tuple(
            Alternative(o, 0.0, o.duration_s * row.remaining,
                        "chosen" if o == option else "higher objective")
            for o in sorted(row.configs, key=lambda o: o.duration_s)[:6])
        if not any(a.verdict == "chosen" for a in alternatives):
            alternatives = (Alternative(option, 0.0, option.duration_s * row.remaining, "chosen"),
                            *alternatives[:5])
        return Decision(self.name, "Sia round: minimises sum of normalised goodput^-0.5 "
                                   "+ lambda_n per unallocated job + lambda_a per change",
                        alternatives)


def _full(run: RunningJob) -> PlanOption:
    """The running option as a whole-job option (the menu's durations are for all the work)."""
    fraction = run.fraction_at_start
    if fraction <= 0:
        return run.option
    return replace(run.option, duration_s=run.option.duration_s / fraction)


def _gpus(row: _Job, config: int) -> int:
    return row.configs[config].num_gpus if config >= 0 else 0


def _can_keep(index: FreeIndex, assignments: Assignments) -> bool:
    return all(set(gpus) <= set(index.free.get(node_id, ())) for node_id, gpus in assignments)


def _restart_penalty_s(run: RunningJob) -> float:
    """The job's restore time as the engine charged it (its restore window), else Sia's
    default 30 s (`get_restart_penalty`)."""
    observed = run.restoring_until_s - run.start_time_s
    return observed if observed > 0 else 30.0


class SiaStaticPolicy:
    """`sia-static`: the project's earlier, non-elastic Sia-style MILP (labelled variant).

    Every decision places queued jobs only: binary x[j, c] over node-shaped configurations that
    fit the free GPUs, maximising goodput per GPU over the job's best goodput per GPU (which
    favours the narrowest configuration), with a 1e-3 age tie-break. Running jobs are never
    resized, migrated or preempted.
    """

    name = "sia-static"
    round_s = 0.0

    def __init__(self, time_limit_s: float = 30.0) -> None:
        self.time_limit_s = time_limit_s
        self.last_status = 0

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = FreeIndex(cluster)
        if not queue or index.total_free() == 0:
            return []
        columns = self._configurations(queue, index)
        if not columns:
            return []
        types = sorted({option.gpu_type for _, option, _ in columns})
        type_row = {t: len(queue) + i for i, t in enumerate(types)}
        rows, cols, vals = [], [], []
        for k, (j, option, _) in enumerate(columns):
            rows += [j, type_row[option.gpu_type]]
            cols += [k, k]
            vals += [1.0, float(option.num_gpus)]
        matrix = coo_matrix((vals, (rows, cols)), shape=(len(queue) + len(types), len(columns)))
        upper = np.concatenate([np.ones(len(queue)),
                                [float(index.free_by_type[t]) for t in types]])
        value = np.array([v for _, _, v in columns])
        result = milp(-value, integrality=np.ones(len(columns)), bounds=Bounds(0, 1),
                      constraints=LinearConstraint(matrix.tocsr(), -np.inf, upper),
                      options={"time_limit": self.time_limit_s})
        self.last_status = result.status
        if result.x is None:
            return []
        chosen = sorted((k for k in range(len(columns)) if result.x[k] > 0.5),
                        key=lambda k: -value[k])
        placements: list[Placement] = []
        for k in chosen:  # bind: node placement can still fail on fragmentation; then skip
            j, option, _ = columns[k]
            assignments = index.best_fit(option.gpu_type, option.num_gpus, option.plan.tp)
            if assignments is not None:
                index.take(assignments)
                placements.append(Placement(queue[j].job_id, option, assignments, decision=Decision(
                    self.name, "static MILP: max goodput per GPU over the job's best",
                    option_alternatives(queue[j].options, option))))
        return placements

    def _configurations(self, queue: Sequence[QueuedJob],
                        index: FreeIndex) -> list[tuple[int, PlanOption, float]]:
        """(job index, option, normalised goodput per GPU) for options that fit the free GPUs."""
        age_rank = {id(job): rank for rank, job in enumerate(
            sorted(queue, key=lambda q: (q.submit_time_s, q.job_id)))}
        columns: list[tuple[int, PlanOption, float]] = []
        for j, job in enumerate(queue):
            present = [o for o in job.options if o.gpu_type in index.node_size]
            if not present:
                continue
            best_gpu_s = min(o.gpu_seconds for o in present)
            fastest: dict[tuple[str, int], PlanOption] = {}
            for option in present:
                key = (option.gpu_type, option.num_gpus)
                if key not in fastest or option.duration_s < fastest[key].duration_s:
                    fastest[key] = option
            tie_break = 1.0 + 1e-3 * (1.0 - age_rank[id(job)] / len(queue))
            for (gpu_type, count), option in fastest.items():
                node = index.node_size[gpu_type]
                if node_shaped(count, node) and count <= index.free_by_type.get(gpu_type, 0):
                    columns.append((j, option, best_gpu_s / option.gpu_seconds * tie_break))
        return columns

