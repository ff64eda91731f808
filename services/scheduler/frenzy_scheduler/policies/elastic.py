"""HAS's elastic moves: admission by shrinking, growth, migration and preemption (docs/has.md).

Event-driven (no rounds) and greedy: a few candidate moves per decision, each judged by its
own predicted gain, so a decision stays fast. What keeps it stable:

* a waiting job is admitted by shrinking running jobs only when its predicted saving beats
  their loss (the slowdown over its run, plus two restarts each: the shrink and the growth
  back) by `min_gain_fraction`; victims step down their own options where the loss per GPU
  freed is least, so a wide job gives a few GPUs rather than falling to one; while the queue
  fits in the free GPUs, a job may instead be displaced whole to idle GPUs of another type,
  charged its slowdown there to its own end (its return is not counted on);
* growth and migration must save at least `min_gain_fraction` of the job's predicted time
  left *and* `min_gain_s`, after the restart: a 30 % predicted saving survives a one-sigma
  prediction error (the simulator's default sigma is 0.3); idle GPUs go where they save the
  most per GPU added;
* hysteresis: a job grows or migrates at most once per `reshape_interval_s`, never while
  restoring; a shrink has to pass the admission test above, so grow and shrink cannot chase
  each other for free;
* growth only uses GPUs that no queued job wants now (the queue pass has already run, and
  GPUs that held jobs wait for are claimed), and at most `grow_cost_limit` x the job's cheapest
  GPU-seconds on the option's type (MARP's wide options burn GPU-time; this bounds the waste);
* preemption is only for urgent deadline jobs (`reclaim`), and takes the non-deadline jobs
  with the most work left first.
"""
from __future__ import annotations

import heapq
import math
from itertools import accumulate
from operator import attrgetter, is_

from dataclasses import replace
from typing import AbstractSet, Callable, Sequence

from frenzy.domain import PlanOption
from frenzy_scheduler.core import (MIGRATE, PREEMPT, RESIZE, Alternative, Decision, Placement,
                                  RunningJob)
from frenzy_scheduler.placement import Assignments, FreeIndex
from frenzy_scheduler.progress import redo_s, remaining_fraction
from frenzy_scheduler.queuediff import IdentityDiff


class Menu:
    """What a running job's option menu implies, derived once per menu (`Menus`)."""

    __slots__ = ("entries", "cheapest_gpu_s", "cheapest_gpu_s_by_type", "cheapest_by_type",
                 "narrower", "fastest_s", "others")

    def __init__(self, options: Sequence[PlanOption]) -> None:
        # (option, type, GPUs, duration s, GPU-seconds), read without property calls. One
        # loop reading each field of an option once: a `PlanOption` is interpreted, so each
        # read is a generic attribute lookup, and a menu is derived for every job that starts
        # (the comprehension, two `min`s over generators and a slice per option had cost
        # about 110,000 instructions a menu; docs/has-performance.md, thirty-third round).
        entries = []
        cheapest_gpu_s = fastest_s = math.inf
        cheapest: dict[str, tuple[float, int, PlanOption]] = {}
        for o in options:
            gpu_type, gpus, duration_s = o.gpu_type, o.num_gpus, o.duration_s
            gpu_s = duration_s * gpus
            entries.append((o, gpu_type, gpus, duration_s, gpu_s))
            if gpu_s < cheapest_gpu_s:
                cheapest_gpu_s = gpu_s
            if duration_s < fastest_s:
                fastest_s = duration_s
            kept = cheapest.get(gpu_type)  # the least (GPU-seconds, GPUs), first on a tie
            if kept is None or gpu_s < kept[0] or gpu_s == kept[0] and gpus < kept[1]:
                cheapest[gpu_type] = (gpu_s, gpus, o)
        self.entries = entries
        self.cheapest_gpu_s = cheapest_gpu_s if entries else 0.0
        self.fastest_s = fastest_s if entries else 0.0
        self.cheapest_by_type = {t: c[2] for t, c in cheapest.items()}
        self.cheapest_gpu_s_by_type = {t: c[0] for t, c in cheapest.items()}
        # `narrower_steps` by (type, GPUs): asked for every running job at every admission
        self.narrower: dict[tuple[str, int], list[tuple[int, float, PlanOption]]] = {}
        self.others: dict[str, list] = {}  # other_types by the job's own type, derived once


class Menus:
    """Menus by the identity of the options tuple, and what a running job's menu implies for
    it by the job's identity (a policy's derived data, never shared)."""

    def __init__(self) -> None:
        self._menus: dict[int, tuple[Sequence[PlanOption], Menu]] = {}
        self._shrinks: dict[int, tuple[RunningJob, float, list[tuple[int, float, PlanOption]]]] = {}
        self._victims: dict[int, list] = {}  # id -> [job, victim without, with displacement]
        # id -> (job, when growth's first test fails for good, `growth_hopeless_from_s`)
        self._grow: dict[int, tuple[RunningJob, float]] = {}

    def retain(self, running: Sequence[RunningJob], slack: int = 1000) -> None:
        """Drop what only jobs no longer running need, once the memos hold far more than the
        running jobs (the same bound as has's facts by queue length). A memo keeps its key
        objects alive, so left to grow it held tens of thousands of finished or reshaped jobs'
        `RunningJob`s and menus (about 1.8 M objects 48,000 decisions into the Philly trace),
        which every full pass of the garbage collector walked. Derived data only: an entry
        dropped is derived again, the same, when next asked for."""
        bound = 4 * len(running) + slack
        if len(self._shrinks) <= bound and len(self._victims) <= bound and \
                len(self._menus) <= bound and len(self._grow) <= bound:
            return
        live = {id(r): r for r in running}
        menus = {id(r.options): r.options for r in running}
        self._shrinks = {k: e for k, e in self._shrinks.items() if live.get(k) is e[0]}
        self._victims = {k: e for k, e in self._victims.items() if live.get(k) is e[0]}
        self._grow = {k: e for k, e in self._grow.items() if live.get(k) is e[0]}
        self._menus = {k: e for k, e in self._menus.items() if menus.get(k) is e[0]}

    def shrink_steps(self, run: RunningJob) -> tuple[float, list[tuple[int, float, PlanOption]]]:
        """(full-work duration s, `narrower_steps`) of a running job: fixed for the job object
        (a `RunningJob` is immutable; a reshape makes a new one), asked every admission."""
        entry = self._shrinks.get(id(run))
        if entry is None or entry[0] is not run:
            entry = self._shrinks[id(run)] = (run, full_duration_s(run),
                                              narrower_steps(run, self.of(run.options)))
        return entry[1], entry[2]

    def victim(self, run: RunningJob, displace: bool
               ) -> tuple[float, list[tuple[int, float, PlanOption]], list] | None:
        """(full-work duration s, `narrower_steps`, `other_types` or [] without `displace`) of
        a running job that could ever give GPUs up (known menu, no deadline, a narrower step
        or, with `displace`, another type), else None: fixed for the job object, like
        `shrink_steps`, and asked for every running job at every admission. The other types
        are derived only when first asked for with `displace`."""
        entry = self._victims.get(id(run))
        if entry is None or entry[0] is not run:
            still: tuple[float, list[tuple[int, float, PlanOption]], list] | None = None
            if run.options and not run.deadline_s:
                full_s, steps = self.shrink_steps(run)
                still = (full_s, steps, []) if steps else None
            entry = self._victims[id(run)] = [run, still, ...]  # ...: not derived yet
        if not displace:
            return entry[1]
        moving = entry[2]
        if moving is ...:
            moving = None
            if run.options and not run.deadline_s:
                full_s, steps = self.shrink_steps(run)
                others = other_types(run, self.of(run.options))
                moving = (full_s, steps, others) if steps or others else None
            entry[2] = moving
        return moving

    def grow_hopeless_from_s(self, run: RunningJob, min_gain_fraction: float,
                             min_gain_s: float) -> float:
        """`growth_hopeless_from_s` of a running job, kept per job object: growth asks it for
        every running job at every decision with idle GPUs."""
        entry = self._grow.get(id(run))
        if entry is None or entry[0] is not run:
            entry = self._grow[id(run)] = (run, growth_hopeless_from_s(
                run, self.of(run.options), min_gain_fraction, min_gain_s))
        return entry[1]

    def of(self, options: Sequence[PlanOption]) -> Menu:
        entry = self._menus.get(id(options))
        if entry is None or entry[0] is not options:
            entry = self._menus[id(options)] = (options, Menu(options))
        return entry[1]


def full_duration_s(run: RunningJob) -> float:
    """The running option's duration for all the job's work (as the menu's are)."""
    fraction = run.fraction_at_start
    return run.option.duration_s / fraction if 0 < fraction < 1.0 else run.option.duration_s


def full_option(run: RunningJob) -> PlanOption:
    if 0 < run.fraction_at_start < 1.0:
        return replace(run.option, duration_s=full_duration_s(run))
    return run.option


def when_left_s(run: RunningJob, fraction: float) -> float:
    """When the work left, done at a steady rate from `fraction_at_start` at the job's begin
    (`RunningJob.remaining_fraction`), reaches `fraction`: -inf for a job counted as done
    (its predicted end not after its begin); for one whose work left never changes (none
    left at its start: live, a job restarted at its last step), -inf or inf as that is
    below `fraction` or not. Exact in reals; callers add a margin."""
    begin_s = max(run.start_time_s, run.restoring_until_s)
    rate = run.fraction_per_s
    if rate <= 0:
        span_s = run.expected_end_s - begin_s
        if span_s <= 0:
            return -math.inf
        rate = run.fraction_at_start / span_s
    if rate <= 0:
        return -math.inf if run.fraction_at_start < fraction else math.inf
    return begin_s + (run.fraction_at_start - fraction) / rate


def rounding_margin_s(time_s: float) -> float:
    """A margin in time far above the rounding of `remaining_fraction` near `time_s` (none
    at an infinite time, which stays what it is)."""
    return 1e-6 * (abs(time_s) + 1.0) if math.isfinite(time_s) else 0.0


def growth_hopeless_from_s(run: RunningJob, menu: "Menu", min_gain_fraction: float,
                           min_gain_s: float) -> float:
    """A time after which growth's first test (`grow`: even the job's fastest option saves
    less than the gain floor, before any restart) fails for good; inf while it may pass.
    With `left` of the work left it passes iff left x (full - fastest) >= both min_gain_s
    and min_gain_fraction x left x full: the second never depends on `left` (a job on its
    fastest option or near it, most jobs once grown, fails it always), the first fails
    once `left` is below min_gain_s / (full - fastest). Margins in the work left and in time
    keep it a bound under rounding: a job near either edge is still tested."""
    if min_gain_s <= 0:
        return math.inf
    full_s = full_duration_s(run)
    saving_s = full_s - menu.fastest_s  # what its fastest option saves on its whole work
    if saving_s < min_gain_fraction * full_s * (1.0 - 1e-9):
        return -math.inf
    if saving_s <= 0.0:
        return math.inf
    when_s = when_left_s(run, min_gain_s / saving_s * (1.0 - 1e-9))
    return when_s + rounding_margin_s(when_s)


def movable(run: RunningJob, now_s: float, interval_s: float) -> bool:
    """Known menu, not restoring, and not moved in the last `interval_s` (hysteresis; a job
    that was never moved started on what was best then, and may move when that changes)."""
    return bool(run.options) and run.restoring_until_s <= now_s and \
        (run.restarts == 0 or now_s - run.start_time_s >= interval_s)


def movable_from_s(run: RunningJob, interval_s: float) -> float:
    """A time no later than when `movable` turns true for a job with a menu: its restore over
    and, if it was moved, `interval_s` after its latest start (a caller keeping what it derived
    from `movable` keeps it until the earliest of these). `movable` compares now - start with
    the interval, and the sum start + interval can round to either side of where that turns
    true (moved at 424.4711385820975 with 600 s: the sum is 1024.4711385820974, where the
    difference is still 599.9999999999999); so a little before the sum: an earlier time only
    has a caller derive its answer afresh sooner."""
    from_s = max(run.restoring_until_s,
                 run.start_time_s + interval_s if run.restarts else -math.inf)
    return from_s - rounding_margin_s(from_s)


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


Shrinkable = dict[str, list[tuple[int, RunningJob, PlanOption]]]


def shrinkable(runs: Sequence[RunningJob], now_s: float, menus: Menus) -> Shrinkable:
    """Per GPU type, the running jobs wider than their cheapest option there (what growth
    gave them), widest excess first. Giving back is never thrashing (growth is what the
    interval limits), so only a job restoring is left alone."""
    out: Shrinkable = {}
    for run in runs:
        if not run.options or run.restoring_until_s > now_s:
            continue
        gpu_type = run.option.gpu_type
        cheapest = menus.of(run.options).cheapest_by_type.get(gpu_type)
        if cheapest is not None and cheapest.num_gpus < run.num_gpus:
            out.setdefault(gpu_type, []).append((run.num_gpus - cheapest.num_gpus, run, cheapest))
    for candidates in out.values():
        candidates.sort(key=lambda c: (-c[0], c[1].job_id))
    return out


def reclaim(runs: Sequence[RunningJob], index: FreeIndex, gpu_type: str, deficit: int,
            now_s: float, interval_s: float, allow_preempt: bool,
            policy: str, reason: str, candidates: Shrinkable) -> list[Placement]:
    """Free `deficit` GPUs of a type for a waiting job: shrink grown jobs back to their
    cheapest option (widest excess first); if that is not enough and `allow_preempt`,
    preempt non-deadline jobs with the most work left. All or nothing."""
    actions: list[Placement] = []
    freed = 0
    if not allow_preempt and sum(c[0] for c in candidates.get(gpu_type, ())) < deficit:
        return []
    for excess, run, cheapest in candidates.get(gpu_type, ()):
        if freed >= deficit:
            break
        kept = shrink_in_place(run, cheapest)
        if kept is None:
            continue
        actions.append(Placement(run.job_id, cheapest, kept, RESIZE, Decision(
            policy, f"shrink to its cheapest option: {reason}",
            (Alternative(cheapest, 0.0, cheapest.duration_s * remaining_fraction(run, now_s),
                         "chosen"),))))
        freed += excess
    if freed < deficit and allow_preempt:
        victims = sorted((r for r in runs if r.option.gpu_type == gpu_type and not r.deadline_s
                          and movable(r, now_s, interval_s)
                          and all(a.job_id != r.job_id for a in actions)),
                         key=lambda r: (-remaining_fraction(r, now_s) * full_duration_s(r),
                                        r.job_id))
        for run in victims:
            if freed >= deficit:
                break
            actions.append(Placement(run.job_id, run.option, (), PREEMPT, Decision(
                policy, f"preempted for a deadline job: {reason}")))
            freed += run.num_gpus
    if freed < deficit:
        return []
    by_id = {r.job_id: r for r in runs if r.option.gpu_type == gpu_type}
    for action in actions:  # the pass may now use what these free
        index.release(by_id[action.job_id].assignments)
        if action.assignments:
            index.take(action.assignments)
    shrunk = {a.job_id for a in actions}
    candidates[gpu_type] = [c for c in candidates.get(gpu_type, ()) if c[1].job_id not in shrunk]
    return actions


def gain_floor_s(current_s: float, min_gain_fraction: float, min_gain_s: float) -> float:
    """The least a move must save, after its restart, for a job with `current_s` left: a share
    of it (prediction error) and at least `min_gain_s`."""
    return max(min_gain_s, min_gain_fraction * current_s)


def move_restart_s(run: RunningJob, restart_floor_s: float, launch_s: float, now_s: float) -> float:
    """What moving a running job costs besides its new run: the restore and a new launch (as
    its last start cost, when measured), and the work since its last checkpoint if it is lost."""
    return (run.restart_s or restart_floor_s + launch_s) + redo_s(run, now_s)


def grow(runs: Sequence[RunningJob], index: FreeIndex, blocked_types: set[str], now_s: float,
         interval_s: float, min_gain_fraction: float, min_gain_s: float, restart_floor_s: float,
         cost_limit: float, max_moves: int, policy: str, menus: Menus,
         launch_s: Callable[[int], float] = lambda nodes: 0.0,
         per_gpu: bool = True, cost_per_type: bool = True) -> list[Placement]:
    """Move running jobs to faster options on GPUs nobody queued wants: resize on their type or
    migrate to another, when the predicted gain clears the thresholds. The idle GPUs go where
    they save the most time per GPU added (each job's best such option, best jobs first), so
    they speed up the jobs that scale rather than the first long job that would take them all;
    a migration that needs no more GPUs than it frees comes first.

    The GPU-time bound compares an option with the job's cheapest on the same GPU type
    (`cost_per_type`): it bounds the scaling loss of going wide, which is what burns GPU-time
    others could use. Against the cheapest on any type (False, the rule until s40), a slower
    type's every option costs more GPU-seconds than a fast type's narrowest, so a job could not
    widen onto idle slow GPUs at any efficiency: a V100-second is not an A100-second."""
    free = index.free_by_type
    if not any(n for t, n in free.items() if t not in blocked_types):
        return []
    wanted = []
    for run in runs:
        if now_s > menus.grow_hopeless_from_s(run, min_gain_fraction, min_gain_s) or \
                not movable(run, now_s, interval_s):
            continue
        left = remaining_fraction(run, now_s)
        current_s = left * full_duration_s(run)
        menu = menus.of(run.options)
        own_type = run.option.gpu_type
        floor_gain_s = gain_floor_s(current_s, min_gain_fraction, min_gain_s)
        if current_s - left * menu.fastest_s < floor_gain_s:
            continue  # not even its fastest option gains enough (the first test below)
        per_type = menu.cheapest_gpu_s_by_type if cost_per_type else None
        best: tuple[float, float, PlanOption, float] | None = None
        for option, gpu_type, gpus, duration_s, gpu_s in menu.entries:
            base_gpu_s = per_type[gpu_type] if per_type is not None else menu.cheapest_gpu_s
            if gpu_s > cost_limit * base_gpu_s or gpu_type in blocked_types:
                continue
            room = free.get(gpu_type, 0) + (run.num_gpus if gpu_type == own_type else 0)
            if gpus > room or current_s - left * duration_s < floor_gain_s:
                continue  # no room, or no gain even before the restart
            nodes = -(-gpus // max(1, index.node_size.get(gpu_type, 1)))
            restart_s = move_restart_s(run, restart_floor_s, launch_s(nodes), now_s)
            new_s = restart_s + left * duration_s
            if current_s - new_s < floor_gain_s:
                continue
            added = gpus - (run.num_gpus if gpu_type == own_type else 0)
            if per_gpu:
                value = (current_s - new_s) / added if added > 0 else math.inf
            else:
                value = current_s
            if best is None or (value, -new_s) > (best[0], -best[1]):
                best = (value, new_s, option, restart_s)
        if best is not None:
            wanted.append((-best[0], -current_s, run.job_id, run, current_s, *best[1:]))
    wanted.sort(key=lambda w: w[:3])
    actions: list[Placement] = []
    for _, _, _, run, current_s, new_s, option, restart_s in wanted:
        if len(actions) >= max_moves:
            break
        own_type = run.option.gpu_type
        room = free.get(option.gpu_type, 0) + (run.num_gpus if option.gpu_type == own_type else 0)
        if option.num_gpus > room:
            continue  # an earlier move took them
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


def shrink_loss_s(left: float, narrower_s: float, current_s: float, horizon_s: float) -> float:
    """The seconds a job with `left` of its work left loses by running `horizon_s` on a
    narrower option (full-work duration `narrower_s` instead of `current_s`): in that time it
    does `horizon x current / narrower` seconds' worth of its current speed, so it ends
    `horizon x (1 - current / narrower)` later. The horizon is cut at the job's own end on
    the narrower option."""
    horizon_s = min(horizon_s, left * narrower_s)
    return horizon_s * (1.0 - current_s / narrower_s) if narrower_s > current_s else 0.0


def narrower_steps(run: RunningJob, menu: Menu) -> list[tuple[int, float, PlanOption]]:
    """The job's options on its own type with fewer GPUs: per count the fastest, widest
    first (the order a shrink steps down in). A function of the menu, the type and the
    count alone, so derived once per menu and kept there (callers never mutate it)."""
    own_type, own_gpus = run.option.gpu_type, run.num_gpus
    steps = menu.narrower.get((own_type, own_gpus))
    if steps is None:
        best: dict[int, tuple[float, PlanOption]] = {}
        for option, gpu_type, gpus, duration_s, _ in menu.entries:
            if gpu_type == own_type and gpus < own_gpus and \
                    (gpus not in best or duration_s < best[gpus][0]):
                best[gpus] = (duration_s, option)
        steps = menu.narrower[own_type, own_gpus] = [
            (gpus, best[gpus][0], best[gpus][1]) for gpus in sorted(best, reverse=True)]
    return steps


ShrinkPlan = tuple[float, list[tuple[RunningJob, PlanOption]]]
# Per GPU type, the running jobs that could give GPUs up: (job, full-work duration s now, the
# fraction of its work left now, its narrower steps on its type, its fastest option per other
# type as (type, [(s, GPUs, option)], fastest first), what touching it costs besides its
# slowdown: `touch_cost_s`).
Victims = dict[str, list[tuple[RunningJob, float, float, list[tuple[int, float, PlanOption]],
                               list[tuple[str, list[tuple[float, int, PlanOption]]]], float]]]


def other_types(run: RunningJob, menu: Menu) -> list[tuple[str, list[tuple[float, int, PlanOption]]]]:
    """The job's options on the other GPU types, per type fastest first (where a displacement
    could send it)."""
    cached = menu.others.get(run.option.gpu_type)
    if cached is not None:
        return cached
    per_type: dict[str, list[tuple[float, int, PlanOption]]] = {}
    for option, gpu_type, gpus, duration_s, _ in menu.entries:
        if gpu_type != run.option.gpu_type:
            per_type.setdefault(gpu_type, []).append((duration_s, gpus, option))
    out = menu.others[run.option.gpu_type] = [
        (t, sorted(per_type[t], key=lambda e: (e[0], e[1]))) for t in sorted(per_type)]
    return out


def victims_by_type(runs: Sequence[RunningJob], now_s: float, menus: Menus,
                    restart_s: float, displace: bool = False) -> Victims:
    """The jobs a newcomer may shrink, per type: known menu, a narrower option on their type
    (or, with `displace`, an option on another type), not restoring (Sia pins those too) and
    no deadline. `restart_s`: the restart of a job that has not measured its own."""
    return {gpu_type: with_work_left(candidates, now_s, restart_s)
            for gpu_type, candidates in victim_candidates(runs, now_s, menus, displace).items()}


# `Victims` less the work left: (job, full-work duration s, narrower steps, other types)
Candidates = dict[str, list[tuple[RunningJob, float, list[tuple[int, float, PlanOption]],
                                  list[tuple[str, list[tuple[float, int, PlanOption]]]]]]]


def victim_candidates(runs: Sequence[RunningJob], now_s: float, menus: Menus,
                      displace: bool = False, interval_s: float = 0.0) -> Candidates:
    """`victims_by_type` without each job's work left, which only the types a plan is built
    for need (`with_work_left`); `spare_gpus` and `most_freed` take these as they are. With
    `interval_s`, a job moved less than that long ago is no victim (`movable`)."""
    return victim_candidates_until(runs, now_s, menus, displace, interval_s)[0]


def victim_candidates_until(runs: Sequence[RunningJob], now_s: float, menus: Menus,
                            displace: bool = False, interval_s: float = 0.0
                            ) -> tuple[Candidates, float]:
    """`victim_candidates`, and the time from which they may differ for the same jobs: the
    earliest that one of them, with a menu that could give GPUs up, becomes movable
    (`movable_from_s`; inf: none). Only those jobs can change the answer as time passes: a
    movable job stays movable (a `RunningJob` is immutable), and one whose menu can give
    nothing up is never a candidate. So a caller keeping the answer asks no other job."""
    out: Candidates = {}
    until_s = math.inf
    for run in runs:
        entry, from_s = _as_candidate(run, now_s, menus, displace, interval_s)
        if entry is None:
            if now_s < from_s < until_s:
                until_s = from_s
            continue
        candidates = out.get(run.option.gpu_type)
        if candidates is None:
            candidates = out[run.option.gpu_type] = []
        candidates.append(entry)
    return out, until_s


def _as_candidate(run: RunningJob, now_s: float, menus: Menus, displace: bool,
                  interval_s: float) -> tuple[tuple | None, float]:
    """A running job's `Candidates` entry now, or None; with None, when it becomes movable
    if its menu could give GPUs up (else inf)."""
    parts = menus.victim(run, displace)
    if parts is None:
        return None, math.inf
    if not movable(run, now_s, interval_s):  # so it turns movable later than now
        return None, max(movable_from_s(run, interval_s), math.nextafter(now_s, math.inf))
    full_s, steps, others = parts
    return (run, full_s, steps, others), math.inf


def with_work_left(candidates: list, now_s: float, restart_s: float) -> list:
    """One type's `victim_candidates` as `Victims` entries: each with its work left now and
    what touching it costs (`touch_cost_s`; `restart_s` for a job that has not measured its
    own restart)."""
    return [(run, full_s, remaining_fraction(run, now_s), steps, others,
             touch_cost_s(run, restart_s, now_s))
            for run, full_s, steps, others in candidates]


def touch_cost_s(run: RunningJob, restart_s: float, now_s: float) -> float:
    """What shrinking or displacing a running job costs it besides its slowdown: two restarts,
    the move now and the growth back later, each as its own last start cost when it measured
    one (live: `RunningJob.restart_s`), else `restart_s`; and the work since its last checkpoint
    when the move throws it away (`RunningJob.redo_s`: a job that does not save on request).
    The same restart that growth charges a move of the job (`move_restart_s`). At least
    `2 * min(restart_s, the least measured restart)`, the bound admission prunes by
    (`least_restart_s`)."""
    return 2 * (run.restart_s or restart_s) + redo_s(run, now_s)


_RESTART_S = attrgetter("restart_s")


def least_restart_s(runs: Sequence[RunningJob], restart_s: float) -> float:
    """The least restart any of `runs` would be charged (`touch_cost_s` has at least twice
    it): `restart_s` for those that have not measured one, their own for those that have."""
    measured = min(filter(None, map(_RESTART_S, runs)), default=restart_s)
    return measured if measured < restart_s else restart_s


class KeptRestarts:
    """`least_restart_s` kept across decisions: the measured restarts of the running jobs,
    updated by the jobs that started and ended since the last ask (found by identity, as
    `KeptCandidates` finds them). Admission asks it at most decisions, and a pass over every
    running job's `restart_s` was 5 % of a decision at 10,000 GPUs (docs/has-performance.md,
    twenty-third round); the simulator's jobs measure none, so the kept set stays empty."""

    def __init__(self) -> None:
        self._diff: IdentityDiff[RunningJob] = IdentityDiff()
        self._measured: dict[int, float] = {}  # id(job) -> its measured restart, if any

    def least_restart_s(self, runs: Sequence[RunningJob], restart_s: float) -> float:
        diff = self._diff.update(runs)
        if diff is None:  # the same job object twice: from scratch
            self._measured = {id(run): run.restart_s for run in runs if run.restart_s}
        else:
            started, ended = diff
            for run in ended:  # first: a started job may reuse an ended one's id
                self._measured.pop(id(run), None)
            for run in started:
                if run.restart_s:
                    self._measured[id(run)] = run.restart_s
        measured = min(self._measured.values(), default=restart_s)
        return measured if measured < restart_s else restart_s


def spare_gpus(candidates: Candidates) -> dict[str, int]:
    """Per type, the most GPUs shrinking could free (every victim down to its narrowest, or
    all of a victim that could be displaced to another type)."""
    return {t: sum(_most_freed_by(run, steps, others) for run, _, steps, others in v)
            for t, v in candidates.items()}


def _most_freed_by(run: RunningJob, steps: list, others: list) -> int:
    """The most GPUs one victim can free: all of them if it could be displaced, else down to
    its narrowest step."""
    return run.num_gpus if others else run.num_gpus - steps[-1][0]


def most_freed(candidates: Candidates) -> dict[str, list[int]]:
    """Per type, the most GPUs that k victims could free, for k = 1, 2, ...: so freeing a
    deficit touches at least `bisect_left(most, deficit) + 1` jobs, each first touch costing
    at least two of the least restart (`touch_cost_s`: a lower bound on any `shrink_plan`'s
    loss). A displaceable victim counts with its whole allocation (a displacement costs the
    same touch, plus a loss >= 0)."""
    return {t: list(accumulate(sorted((_most_freed_by(run, steps, others)
                                       for run, _, steps, others in v), reverse=True)))
            for t, v in candidates.items()}


class KeptCandidates:
    """`victim_candidates_until`, `spare_gpus` and `most_freed` kept across decisions and
    updated by the running jobs that started and ended since the last ask, as
    `releases.ReleaseTimes` keeps the release lists. At 10,000 GPUs a decision after one event
    otherwise looked at all ~2,500 running jobs again (a sixth of the decision,
    docs/has-performance.md, twenty-third round); the identity diff compares pointers only.

    Why the kept answer equals one derived from scratch (`tests/test_has_fast_paths.py`):
    * a job's part (`Menus.victim`) is fixed for the job object, and `movable` only turns
      true as time passes; so for the same jobs the answer changes only at `until_s`, the
      earliest time a job with a part becomes movable, from which on it is derived afresh
      (and when time goes back, or the setting differs);
    * each type's candidates are in the order of `running`: a job that left is deleted (the
      rest keep their order), and jobs that started are appended only when they are the
      tail of `running` in their order (the simulator's running dict puts a started or
      reshaped job last); any other change derives afresh. Live, `LiveState` replaces a
      job's record in its place as its progress is measured, so most live decisions derive
      afresh, as they did before this class;
    * spare and most freed are derived again for the types whose candidates changed.
    A job that left may have set `until_s`: an earlier `until_s` only derives afresh sooner."""

    def __init__(self) -> None:
        self._diff: IdentityDiff[RunningJob] = IdentityDiff()
        self._setting: tuple | None = None  # (menus, displace, interval_s) kept for
        self._now_s = math.inf  # the last ask: the answer holds from it until `_until_s`
        self._until_s = -math.inf
        # per type, id(job) -> (job, full-work s, steps, others), in the order of `running`
        self._by_type: dict[str, dict[int, tuple]] = {}
        self._type_of: dict[int, str] = {}  # id(job) -> its type, for the candidates
        self._candidates: Candidates = {}
        self._spare: dict[str, int] = {}
        self._most: dict[str, list[int]] = {}

    def of(self, running: Sequence[RunningJob], now_s: float, menus: Menus, displace: bool,
           interval_s: float) -> tuple[Candidates, dict[str, int], dict[str, list[int]]]:
        """(candidates, spare, most freed) for `running` now; read-only for the caller."""
        diff = self._diff.update(running)
        setting = (menus, displace, interval_s)
        if diff is None or setting != self._setting or not self._now_s <= now_s < self._until_s:
            return self._rebuild(running, now_s, menus, displace, interval_s)
        self._now_s = now_s
        started, ended = diff
        if not started and not ended:
            return self._candidates, self._spare, self._most
        tail = self._diff.items
        if len(started) > len(tail) // 2 or \
                not all(map(is_, started, tail[len(tail) - len(started):])):
            return self._rebuild(running, now_s, menus, displace, interval_s)
        changed: set[str] = set()
        for run in ended:
            gpu_type = self._type_of.pop(id(run), None)
            if gpu_type is not None:
                del self._by_type[gpu_type][id(run)]
                changed.add(gpu_type)
        for run in started:
            entry, from_s = _as_candidate(run, now_s, menus, displace, interval_s)
            if entry is None:
                if now_s < from_s < self._until_s:
                    self._until_s = from_s
                continue
            gpu_type = run.option.gpu_type
            self._by_type.setdefault(gpu_type, {})[id(run)] = entry
            self._type_of[id(run)] = gpu_type
            changed.add(gpu_type)
        if changed:
            candidates, spare, most = dict(self._candidates), dict(self._spare), dict(self._most)
            for gpu_type in changed:
                kept = self._by_type[gpu_type]
                if kept:
                    candidates[gpu_type] = list(kept.values())
                    spare.update(spare_gpus({gpu_type: candidates[gpu_type]}))
                    most.update(most_freed({gpu_type: candidates[gpu_type]}))
                else:
                    del self._by_type[gpu_type]
                    for kept_by_type in (candidates, spare, most):
                        kept_by_type.pop(gpu_type, None)
            self._candidates, self._spare, self._most = candidates, spare, most
        return self._candidates, self._spare, self._most

    def _rebuild(self, running: Sequence[RunningJob], now_s: float, menus: Menus,
                 displace: bool, interval_s: float
                 ) -> tuple[Candidates, dict[str, int], dict[str, list[int]]]:
        candidates, self._until_s = victim_candidates_until(running, now_s, menus, displace,
                                                            interval_s)
        self._setting, self._now_s = (menus, displace, interval_s), now_s
        self._by_type = {t: {id(c[0]): c for c in v} for t, v in candidates.items()}
        self._type_of = {id(c[0]): t for t, v in candidates.items() for c in v}
        self._candidates = candidates
        self._spare, self._most = spare_gpus(candidates), most_freed(candidates)
        return self._candidates, self._spare, self._most


def shrink_plan(victims: Victims, gpu_type: str, deficit: int, horizon_s: float,
                skip: AbstractSet[str] = frozenset(),
                free: dict[str, int] | None = None,
                moves: dict[str, tuple[int, float, PlanOption] | None] | None = None,
                return_counted: bool = False) -> ShrinkPlan | None:
    """Free `deficit` GPUs of a type by shrinking running jobs where it costs least: greedy on
    the loss per GPU freed (`shrink_loss_s` over the newcomer's `horizon_s`, plus the job's
    `touch_cost_s` the first time it is touched: two restarts, the shrink and the growth back
    when the GPUs free up).
    Each job steps down its own options one at a time, so a wide job gives a few GPUs rather
    than falling to one. With `free` (GPUs free now per type), an untouched job may instead
    be displaced whole to its fastest option on another type that has the GPUs free
    (`displacement`), per GPU it frees at a loss of its slowdown there **to its own end**
    plus its touch cost: a move back needs the fast GPUs free after the queue's pass, which
    under a queue they are not (the sustained-load lesson of start-now, docs/has.md), so the
    return is not counted on; unless `return_counted`, for a caller whose displaced jobs keep
    a place in line for their faster types and move back at their turn (has's `keep_place`):
    then, as a shrunk job's, the slowdown over `horizon_s`, the touch cost being the move out
    and the move back. Returns (total loss s, [(job, its new option)]) or None when the
    type's running jobs cannot give enough. `moves`: the caller's memo of each job's
    displacement for this `free` (it does not depend on the newcomer). Pure: nothing is taken
    or released.

    A job's cheapest give-up costs the same until the job itself is stepped or a displacement
    takes free GPUs, so the candidates wait in a heap by (loss per GPU, job id): a step costs
    O(log jobs), not a scan of them all, and the same job is picked as by a scan (ids are
    unique, so no two keys tie). A displacement changes every untouched job's options, so it
    rebuilds the heap."""
    # job id -> (job, full-work duration s on its option now, fraction of work left, GPUs now,
    # steps taken, its new option: None while untouched)
    state: dict[str, tuple[RunningJob, float, float, int, int, PlanOption | None]] = {
        run.job_id: (run, current_s, left, run.num_gpus, 0, None)
        for run, current_s, left, _, _, _ in victims.get(gpu_type, ()) if run.job_id not in skip}
    steps_of = {run.job_id: steps for run, _, _, steps, _, _ in victims.get(gpu_type, ())}
    others_of = {run.job_id: others for run, _, _, _, others, _ in victims.get(gpu_type, ())}
    touch_of = {run.job_id: touch_s for run, _, _, _, _, touch_s in victims.get(gpu_type, ())}
    free_left = dict(free) if free is not None else {}
    memo = moves  # valid while free_left is the caller's `free`
    displaced_horizon_s = horizon_s if return_counted else math.inf

    def candidate(job_id: str) -> tuple[float, str, float, tuple[int, float, PlanOption] | None] | None:
        """The job's cheapest next give-up per GPU: its next narrower step, or (untouched)
        its displacement. Changes only when the job steps, or a displacement takes GPUs."""
        run, current_s, left, gpus, taken, chosen = state[job_id]
        best: tuple[float, str, float, tuple[int, float, PlanOption] | None] | None = None
        steps = steps_of[job_id]
        if taken < len(steps):
            step_gpus, step_s, _ = steps[taken]
            loss_s = shrink_loss_s(left, step_s, current_s, horizon_s)
            if chosen is None:
                loss_s += touch_of[job_id]
            best = (loss_s / (gpus - step_gpus), job_id, loss_s, None)
        if chosen is None and free is not None:
            if memo is not None:
                if job_id in memo:
                    move = memo[job_id]
                else:
                    move = memo[job_id] = displacement(others_of[job_id], free_left)
            else:
                move = displacement(others_of[job_id], free_left)
            if move is not None:
                # to its end, unless its return is counted on (see the docstring)
                loss_s = shrink_loss_s(left, move[1], current_s, displaced_horizon_s) + \
                    touch_of[job_id]
                if best is None or (loss_s / gpus, job_id) < best[:2]:
                    best = (loss_s / gpus, job_id, loss_s, move)
        return best

    heap = [c for job_id in state if (c := candidate(job_id)) is not None]
    heapq.heapify(heap)
    freed, loss_total_s = 0, 0.0
    while freed < deficit:
        if not heap:
            return None
        _, job_id, loss_s, move = heapq.heappop(heap)
        run, _, left, gpus, taken, _ = state[job_id]
        if move is not None:  # displaced whole: nothing more to take from it
            move_gpus, move_s, option = move
            free_left[option.gpu_type] -= move_gpus
            state[job_id] = (run, move_s, left, 0, len(steps_of[job_id]) + 1, option)
            steps_of[job_id] = []
            freed += gpus
            memo = None  # the free GPUs changed
            heap = [c for j in state if (c := candidate(j)) is not None]
            heapq.heapify(heap)
        else:
            step_gpus, step_s, option = steps_of[job_id][taken]
            state[job_id] = (run, step_s, left, step_gpus, taken + 1, option)
            freed += gpus - step_gpus
            step = candidate(job_id)
            if step is not None:
                heapq.heappush(heap, step)
        loss_total_s += loss_s
    return loss_total_s, [(s[0], s[5]) for s in state.values() if s[5] is not None]


def shrink_loss_floor(victims: Victims, gpu_type: str, deficit: int, horizon_s: float,
                      skip: AbstractSet[str] = frozenset(),
                      free: dict[str, int] | None = None,
                      moves: dict[str, tuple[int, float, PlanOption] | None] | None = None,
                      return_counted: bool = False) -> float:
    """A lower bound on the loss of `shrink_plan` with the same arguments (inf when no plan
    frees the deficit), at a fraction of its cost: admission builds a plan only when even
    this floor leaves it a gain (on jobs 30,000-33,000 of the trace the floor is 0.89 of the
    plan's loss on average, and it spares 94 % of the plans).

    Why it is a floor: `shrink_plan` uses each job either by a prefix of its narrower steps
    (the first costing its touch more) or, untouched, by a displacement. So a job's loss
    is at least its least loss per GPU over those uses (`per_gpu`) times the GPUs it frees,
    and a plan frees at least `deficit` GPUs with each job giving at most its `most`: the
    plan's loss is at least the cheapest fractional filling of the deficit (the knapsack's
    relaxation, cheapest per GPU first). A displacement inside the plan only takes free
    GPUs, which leaves the others' displacements slower (a larger loss), never faster, so
    the free GPUs as given bound them. Shares `moves` with `shrink_plan` (same `free`).

    Every loss is non-decreasing in the horizon (`shrink_loss_s`), so the per-GPU costs of
    a shorter horizon (`floor_items`) fill a floor for any longer one (`fill_floor`): what
    admission reuses across a job's options of one type, which it visits fastest first."""
    return fill_floor(floor_items(victims, gpu_type, horizon_s, skip, free, moves,
                                  return_counted), deficit)


def floor_items(victims: Victims, gpu_type: str, horizon_s: float,
                skip: AbstractSet[str] = frozenset(), free: dict[str, int] | None = None,
                moves: dict[str, tuple[int, float, PlanOption] | None] | None = None,
                return_counted: bool = False) -> list[tuple[float, int]]:
    """`shrink_loss_floor`'s (least loss per GPU, most GPUs) of each job, cheapest first."""
    displaced_horizon_s = horizon_s if return_counted else math.inf
    items = []
    for run, current_s, left, steps, others, touch_s in victims.get(gpu_type, ()):
        if run.job_id in skip:
            continue
        gpus = run.num_gpus
        per_gpu, most = math.inf, 0
        loss_s, before_s = touch_s, current_s
        for step_gpus, step_s, _ in steps:  # shrink_loss_s, inlined
            if step_s > before_s:
                loss_s += min(horizon_s, left * step_s) * (1.0 - before_s / step_s)
            before_s = step_s
            if loss_s / (gpus - step_gpus) < per_gpu:
                per_gpu = loss_s / (gpus - step_gpus)
        if steps:
            most = gpus - steps[-1][0]
        if free is not None and others:
            if moves is not None:
                if run.job_id in moves:
                    move = moves[run.job_id]
                else:
                    move = moves[run.job_id] = displacement(others, free)
            else:
                move = displacement(others, free)
            if move is not None:
                most = gpus
                loss_s = shrink_loss_s(left, move[1], current_s, displaced_horizon_s) + touch_s
                if loss_s / gpus < per_gpu:
                    per_gpu = loss_s / gpus
        if most:
            items.append((per_gpu, most))
    items.sort()
    return items


def fill_floor(items: list[tuple[float, int]], deficit: int) -> float:
    """The cheapest fractional filling of `deficit` GPUs from `floor_items` (inf: cannot)."""
    floor_s, short = 0.0, deficit
    for per_gpu, most in items:
        if most >= short:
            return floor_s + per_gpu * short
        floor_s += per_gpu * most
        short -= most
    return math.inf  # even every job at its most cannot free the deficit: no plan


def displacement(others: list[tuple[str, list[tuple[float, int, PlanOption]]]],
                 free: dict[str, int]) -> tuple[int, float, PlanOption] | None:
    """The fastest option on another type whose GPUs are free: (GPUs, full-work s, option)."""
    best: tuple[int, float, PlanOption] | None = None
    for gpu_type, options in others:
        have = free.get(gpu_type, 0)
        for duration_s, gpus, option in options:  # fastest first
            if gpus <= have:
                if best is None or (duration_s, gpus) < (best[1], best[0]):
                    best = (gpus, duration_s, option)
                break
    return best


def apply_shrinks(plan: Sequence[tuple[RunningJob, PlanOption]], index: FreeIndex, policy: str,
                  reason: str, now_s: float) -> list[Placement] | None:
    """Shrink each job in place to its planned option (in the pass's index), or move a
    displaced one to best-fit nodes of its new type; None, with the index untouched, if some
    job's GPUs cannot be cut down to whole tp groups or a displaced job does not fit."""
    kept_by_job = []
    for run, option in plan:
        if option.gpu_type != run.option.gpu_type:
            continue
        kept = shrink_in_place(run, option)
        if kept is None:
            return None
        kept_by_job.append((run, option, kept))
    moved: list[tuple[RunningJob, PlanOption, Assignments]] = []
    for run, option in plan:  # displacements: their new GPUs are free now
        if option.gpu_type == run.option.gpu_type:
            continue
        assignments = index.best_fit(option.gpu_type, option.num_gpus, option.plan.tp)
        if assignments is None:
            for _, _, taken in moved:
                index.release(taken)
            return None
        index.take(assignments)
        moved.append((run, option, assignments))
    actions = []
    for run, option, kept in kept_by_job + moved:
        index.release(run.assignments)
        if option.gpu_type == run.option.gpu_type:
            index.take(kept)
        left_s = option.duration_s * remaining_fraction(run, now_s)
        kind = RESIZE if option.gpu_type == run.option.gpu_type else MIGRATE
        actions.append(Placement(run.job_id, option, kept, kind, Decision(
            policy, f"{'shrunk' if kind == RESIZE else 'displaced'} to admit {reason}",
            (Alternative(option, 0.0, left_s, "chosen"),
             Alternative(run.option, 0.0, full_duration_s(run) * remaining_fraction(run, now_s),
                         "current: its GPUs admit a waiting job")))))
    return actions


def undo_shrinks(plan: Sequence[tuple[RunningJob, PlanOption]], actions: Sequence[Placement],
                 index: FreeIndex) -> None:
    """Give the index back what `apply_shrinks` changed (the newcomer did not fit after all)."""
    for action in actions:
        run = next(r for r, _ in plan if r.job_id == action.job_id)
        index.release(action.assignments)
        index.take(run.assignments)
