"""HAS's elastic moves: grow, shrink, migrate and preempt running jobs (see docs/has.md).

Event-driven (no rounds) and greedy: a few candidate moves per decision, each judged by its
own predicted gain, so a decision stays sub-millisecond. What keeps it stable:

* a move must save at least `min_gain_fraction` of the job's predicted remaining time *and*
  `min_gain_s`, after paying the restart cost: a 30 % predicted saving survives a one-sigma
  prediction error (the simulator's default sigma is 0.3);
* hysteresis: a job grows or migrates at most once per `reshape_interval_s`, never while
  restoring; shrinking back is always allowed (it only undoes growth);
* growth only uses GPUs that no queued job wants now (the queue pass has already run, and
  GPUs that held jobs wait for are claimed), and at most `grow_cost_limit` x the job's cheapest
  GPU-seconds (MARP's wide options burn GPU-time; this bounds the waste);
* shrinking gives back only what growth took (a job never goes below its cheapest option on its
  type), so grow and shrink cannot chase each other;
* preemption is only for urgent deadline jobs, and takes the non-deadline jobs with the most
  work left first.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from frenzy.domain import PlanOption
from frenzy_scheduler.core import (MIGRATE, PREEMPT, RESIZE, Alternative, Decision, Placement,
                                  RunningJob)
from frenzy_scheduler.placement import Assignments, FreeIndex


def full_option(run: RunningJob) -> PlanOption:
    """The running option with its duration for all the job's work (as the menu's are)."""
    if run.fraction_at_start <= 0 or run.fraction_at_start >= 1.0:
        return run.option
    return replace(run.option, duration_s=run.option.duration_s / run.fraction_at_start)


def movable(run: RunningJob, now_s: float, interval_s: float) -> bool:
    """Known menu, not restoring, and not moved in the last `interval_s` (hysteresis; a job
    that was never moved started on what was best then, and may move when that changes)."""
    return bool(run.options) and run.restoring_until_s <= now_s and \
        (run.restarts == 0 or now_s - run.start_time_s >= interval_s)


def cheapest_on(run: RunningJob, gpu_type: str) -> PlanOption | None:
    on_type = [o for o in run.options if o.gpu_type == gpu_type]
    return min(on_type, key=lambda o: (o.gpu_seconds, o.num_gpus)) if on_type else None


def shrink_in_place(run: RunningJob, option: PlanOption) -> Assignments | None:
    """A subset of the job's own GPUs for a narrower option: whole tp groups per node, the
    fullest nodes first (so the fewest nodes stay spanned)."""
    step = max(1, option.plan.tp)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    needed = option.num_gpus
    for node_id, gpus in sorted(run.assignments, key=lambda a: -len(a[1])):
        if needed == 0:
            break
        take = min(len(gpus), needed) // step * step
        if take:
            chosen.append((node_id, tuple(gpus[:take])))
            needed -= take
    return tuple(chosen) if needed == 0 else None


def reclaim(runs: Sequence[RunningJob], index: FreeIndex, gpu_type: str, deficit: int,
            now_s: float, interval_s: float, allow_preempt: bool,
            policy: str, reason: str) -> list[Placement]:
    """Free `deficit` GPUs of a type for a waiting job: shrink grown jobs back to their
    cheapest option (widest excess first); if that is not enough and `allow_preempt`,
    preempt non-deadline jobs with the most work left. All or nothing."""
    actions: list[Placement] = []
    freed = 0
    candidates = []
    for run in runs:  # giving back is never thrashing: growth is what the interval limits
        if run.option.gpu_type != gpu_type or not run.options or run.restoring_until_s > now_s:
            continue
        cheapest = cheapest_on(run, gpu_type)
        if cheapest is not None and cheapest.num_gpus < run.num_gpus:
            candidates.append((run.num_gpus - cheapest.num_gpus, run, cheapest))
    for excess, run, cheapest in sorted(candidates, key=lambda c: (-c[0], c[1].job_id)):
        if freed >= deficit:
            break
        kept = shrink_in_place(run, cheapest)
        if kept is None:
            continue
        actions.append(Placement(run.job_id, cheapest, kept, RESIZE, Decision(
            policy, f"shrink to its cheapest option: {reason}",
            (Alternative(cheapest, 0.0, cheapest.duration_s * run.remaining_fraction(now_s),
                         "chosen"),))))
        freed += excess
    if freed < deficit and allow_preempt:
        victims = sorted((r for r in runs if r.option.gpu_type == gpu_type and not r.deadline_s
                          and movable(r, now_s, interval_s)
                          and all(a.job_id != r.job_id for a in actions)),
                         key=lambda r: (-r.remaining_fraction(now_s) * full_option(r).duration_s,
                                        r.job_id))
        for run in victims:
            if freed >= deficit:
                break
            actions.append(Placement(run.job_id, run.option, (), PREEMPT, Decision(
                policy, f"preempted for a deadline job: {reason}")))
            freed += run.num_gpus
    if freed < deficit:
        return []
    for action in actions:  # the pass may now use what these free
        run = next(r for r in runs if r.job_id == action.job_id)
        index.release(run.assignments)
        if action.assignments:
            index.take(action.assignments)
    return actions


def grow(runs: Sequence[RunningJob], index: FreeIndex, blocked_types: set[str], now_s: float,
         interval_s: float, min_gain_fraction: float, min_gain_s: float, restart_floor_s: float,
         cost_limit: float, max_moves: int, policy: str,
         launch_s: Callable[[int], float] = lambda nodes: 0.0) -> list[Placement]:
    """Move running jobs to faster options on GPUs nobody queued wants: resize on their type or
    migrate to another, when the predicted gain clears the thresholds. Longest work first."""
    if index.total_free() == 0:
        return []
    actions: list[Placement] = []
    candidates = sorted((r for r in runs if movable(r, now_s, interval_s)),
                        key=lambda r: (-r.remaining_fraction(now_s) * full_option(r).duration_s,
                                       r.job_id))
    for run in candidates:
        if len(actions) >= max_moves or index.total_free() == 0:
            break
        left = run.remaining_fraction(now_s)
        current_s = left * full_option(run).duration_s
        cheapest_gpu_s = min(o.gpu_seconds for o in run.options)
        own_type = run.option.gpu_type
        best: tuple[float, PlanOption] | None = None
        for option in run.options:
            if option.gpu_type in blocked_types or option.gpu_seconds > cost_limit * cheapest_gpu_s:
                continue
            room = index.free_by_type.get(option.gpu_type, 0) + (
                run.num_gpus if option.gpu_type == own_type else 0)
            if option.num_gpus > room:
                continue
            nodes = -(-option.num_gpus // max(1, index.node_size.get(option.gpu_type, 1)))
            restart_s = restart_floor_s + launch_s(nodes)  # restore, then a new launch
            new_s = restart_s + left * option.duration_s
            gain_s = current_s - new_s
            if gain_s < max(min_gain_s, min_gain_fraction * current_s):
                continue
            if best is None or new_s < best[0]:
                best = (new_s, option, restart_s)
        if best is None:
            continue
        new_s, option, restart_s = best
        index.release(run.assignments)
        assignments = index.best_fit(option.gpu_type, option.num_gpus, option.plan.tp)
        if assignments is None:
            index.take(run.assignments)
            continue
        index.take(assignments)
        kind = RESIZE if option.gpu_type == own_type else MIGRATE
        actions.append(Placement(run.job_id, option, assignments, kind, Decision(
            policy, f"{kind}: predicted {current_s:.0f} s left -> {new_s:.0f} s with the restart "
                    f"({restart_s:.0f} s), on GPUs no queued job wants",
            (Alternative(option, restart_s, new_s, "chosen"),
             Alternative(run.option, 0.0, current_s, "current: slower")))))
    return actions
