"""HAS: heterogeneity-aware scheduling by estimated completion time (see docs/has.md).

One pass over the queue per decision, in the Kubernetes framework's steps:

1. sort: shortest predicted duration first, with aging (`key = best_duration - aging_rate *
   waited`) so every job's key eventually beats any newcomer's; jobs near a deadline go first;
2. filter: options whose GPU type exists and whose shape a node set can host;
3. score: estimated completion time = expected start + MARP duration. The expected start of
   an option that cannot start now comes from the running jobs' expected ends, minus what
   higher-priority jobs in this pass already wait for. A job holds (stays queued) when waiting
   for faster GPUs finishes earlier than starting now on slower ones;
4. reserve: best-fit nodes (`FreeIndex.best_fit`), which keeps whole nodes free for big jobs;
   a job blocked for `reserve_after_s` gets an EASY-style reservation on its type, and later
   jobs may use that type only if they end before it or fit in the spare GPUs (backfill).

Everything is O(queue x options) dictionary work plus a sort; no solver.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence

from frenzy.domain import PlanOption
from frenzy_scheduler.core import ClusterView, Placement, QueuedJob, RunningJob
from frenzy_scheduler.placement import FreeIndex

INF = math.inf


@dataclass(frozen=True)
class HasConfig:
    aging_rate: float = 0.2  # priority seconds a job gains per second waited (no starvation)
    reserve_after_s: float = 6 * 3600.0  # a job blocked this long reserves GPUs (EASY backfill)
    deadline_urgency: float = 1.0  # urgent when slack < this x the job's best duration
    gpu_cost_weight: float = 1.0  # under queue pressure, weight of extra GPU-seconds an option burns


@dataclass(frozen=True)
class _JobFacts:
    """Per-job data derived once from MARP's options (pure function of the options)."""

    options: Sequence[PlanOption]
    ranked: tuple[PlanOption, ...]  # fastest first
    # (option, type, GPUs, duration, GPU-seconds) per ranked option: properties read once
    entries: tuple[tuple[PlanOption, str, int, float, float], ...]
    best_s: float
    min_gpu_seconds: float
    min_gpus: int


@dataclass
class _Reservation:
    shadow_s: float  # when the blocked job is expected to start
    spare_gpus: int  # GPUs of the type that backfill may still use past the shadow time


class _ReleaseProfile:
    """When GPUs of each type are expected to free up, from the running jobs' expected ends."""

    def __init__(self, running: Sequence[RunningJob], now_s: float) -> None:
        per_type: dict[str, list[tuple[float, int]]] = {}
        for job in running:
            per_type.setdefault(job.option.gpu_type, []).append(
                (max(job.expected_end_s, now_s), job.num_gpus))
        self.ends: dict[str, list[float]] = {}
        self.cumulative: dict[str, list[int]] = {}
        for gpu_type, releases in per_type.items():
            releases.sort()
            total, cum = 0, []
            for _, gpus in releases:
                total += gpus
                cum.append(total)
            self.ends[gpu_type] = [end for end, _ in releases]
            self.cumulative[gpu_type] = cum

    def time_until(self, gpu_type: str, gpus_needed: int, now_s: float) -> float:
        """Seconds until `gpus_needed` more GPUs of the type are released (inf if never)."""
        if gpus_needed <= 0:
            return 0.0
        cum = self.cumulative.get(gpu_type)
        if not cum or cum[-1] < gpus_needed:
            return INF
        return self.ends[gpu_type][bisect.bisect_left(cum, gpus_needed)] - now_s


class HasPolicy:
    name = "has"

    def __init__(self, config: HasConfig = HasConfig()) -> None:
        self.config = config
        self._facts: dict[str, _JobFacts] = {}  # cache of derived data, keyed by job id

    def _job_facts(self, job: QueuedJob, node_size: dict[str, int]) -> _JobFacts | None:
        facts = self._facts.get(job.job_id)
        if facts is None or facts.options is not job.options:
            usable = [o for o in job.options if o.gpu_type in node_size]
            if not usable:
                return None
            ranked = tuple(sorted(usable, key=lambda o: (o.duration_s, o.num_gpus, o.gpu_type)))
            entries = tuple((o, o.gpu_type, o.num_gpus, o.duration_s, o.gpu_seconds) for o in ranked)
            facts = _JobFacts(job.options, ranked, entries, ranked[0].duration_s,
                              min(o.gpu_seconds for o in ranked), min(o.num_gpus for o in ranked))
            self._facts[job.job_id] = facts
        return facts

    def _order(self, queue: Sequence[QueuedJob], facts: dict[str, _JobFacts],
               now_s: float) -> list[QueuedJob]:
        """Urgent deadline jobs by slack, then shortest aged duration, then arrival."""
        urgency = self.config.deadline_urgency
        aging = self.config.aging_rate

        def key(job: QueuedJob) -> tuple[int, float, float, str]:
            best = facts[job.job_id].best_s
            if job.deadline_s > 0:
                slack = job.deadline_s - now_s - best
                if slack < urgency * best:
                    return (0, slack, job.submit_time_s, job.job_id)
            return (1, best - aging * (now_s - job.submit_time_s), job.submit_time_s, job.job_id)

        return sorted((j for j in queue if j.job_id in facts), key=key)

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = FreeIndex(cluster)
        if not queue or index.total_free() == 0:
            return []
        if len(self._facts) > 4 * len(queue) + 1000:
            self._facts.clear()
        facts: dict[str, _JobFacts] = {}
        for job in queue:
            job_facts = self._job_facts(job, index.node_size)
            if job_facts is not None:
                facts[job.job_id] = job_facts
        capacity = cluster.total_by_type()
        total_free = index.total_free()
        demand = sum(f.min_gpus for f in facts.values())
        pressure = min(1.0, max(0.0, demand / max(1, total_free) - 1.0))
        releases = _ReleaseProfile(running, now_s)
        claimed: dict[str, int] = {}  # GPUs per type that held jobs in this pass wait for
        reservations: dict[str, _Reservation] = {}
        placements: list[Placement] = []
        for job in self._order(queue, facts, now_s):
            if index.total_free() == 0:
                break
            job_facts = facts[job.job_id]
            free = index.free_by_type
            if all(free.get(t, 0) < n for _, t, n, _, _ in job_facts.entries):
                self._maybe_reserve(job, job_facts, index, releases, claimed, reservations,
                                    capacity, now_s)
                continue
            choice = self._choose(job, job_facts, index, releases, claimed, reservations,
                                  capacity, pressure, now_s)
            if isinstance(choice, Placement):
                index.take(choice.assignments)
                placements.append(choice)
            elif choice is not None:  # holding for a faster type: later jobs see that claim
                if not self._maybe_reserve(job, job_facts, index, releases, claimed,
                                           reservations, capacity, now_s):
                    claimed[choice.gpu_type] = claimed.get(choice.gpu_type, 0) + choice.num_gpus
        return placements

    @staticmethod
    def _expected_wait_s(option: PlanOption, index: FreeIndex, releases: _ReleaseProfile,
                         claimed: dict[str, int], reservations: dict[str, _Reservation],
                         now_s: float) -> float:
        """Seconds until the option could start; called only when it cannot start now, so at
        least one more release is needed (the free GPUs may be fragmented or reserved)."""
        gpu_type = option.gpu_type
        short = option.num_gpus + claimed.get(gpu_type, 0) - index.free_by_type.get(gpu_type, 0)
        wait_s = releases.time_until(gpu_type, max(1, short), now_s)
        reservation = reservations.get(gpu_type)
        if reservation is not None:
            wait_s = max(wait_s, reservation.shadow_s - now_s)
        return wait_s

    def _choose(self, job: QueuedJob, facts: _JobFacts, index: FreeIndex,
                releases: _ReleaseProfile, claimed: dict[str, int],
                reservations: dict[str, _Reservation], capacity: dict[str, int],
                pressure: float, now_s: float) -> Placement | PlanOption | None:
        """A placement to start now, an option to hold for, or None when nothing fits."""
        exponent = pressure * self.config.gpu_cost_weight
        best_now: tuple[float, Placement] | None = None
        best_wait: tuple[float, PlanOption] | None = None
        free = index.free_by_type
        for option, gpu_type, gpus, duration_s, gpu_seconds in facts.entries:
            if gpus > capacity.get(gpu_type, 0):
                continue
            cost = duration_s
            if exponent:
                cost *= (gpu_seconds / facts.min_gpu_seconds) ** exponent
            if best_now is not None and cost >= best_now[0]:
                continue  # ranked fastest first, but the GPU cost can reorder: keep scanning
            if best_wait is not None and cost >= best_wait[0] and \
                    (best_now is not None or free.get(gpu_type, 0) < gpus):
                continue  # cannot beat the best option to wait for
            assignments = None
            if free.get(gpu_type, 0) >= gpus and (
                    not reservations or self._backfill_allowed(option, reservations, now_s)):
                assignments = index.best_fit(gpu_type, gpus, option.plan.tp)
            if assignments is not None:
                best_now = (cost, Placement(job.job_id, option, assignments))
                continue
            wait_s = self._expected_wait_s(option, index, releases, claimed, reservations,
                                           now_s)
            if best_wait is None or wait_s + cost < best_wait[0]:
                best_wait = (wait_s + cost, option)
        if best_now is not None and (best_wait is None or best_now[0] <= best_wait[0]):
            reservation = reservations.get(best_now[1].option.gpu_type)
            if reservation is not None and now_s + best_now[1].option.duration_s > reservation.shadow_s:
                reservation.spare_gpus -= best_now[1].option.num_gpus
            return best_now[1]
        return best_wait[1] if best_wait is not None else None

    @staticmethod
    def _backfill_allowed(option: PlanOption, reservations: dict[str, _Reservation],
                          now_s: float) -> bool:
        reservation = reservations.get(option.gpu_type)
        return (reservation is None or now_s + option.duration_s <= reservation.shadow_s
                or option.num_gpus <= reservation.spare_gpus)

    def _maybe_reserve(self, job: QueuedJob, facts: _JobFacts, index: FreeIndex,
                       releases: _ReleaseProfile, claimed: dict[str, int],
                       reservations: dict[str, _Reservation], capacity: dict[str, int],
                       now_s: float) -> bool:
        """Give a long-blocked job a reservation on the type where it would finish first."""
        if now_s - job.submit_time_s < self.config.reserve_after_s:
            return False
        best: tuple[float, float, PlanOption] | None = None
        for option in facts.ranked:
            if option.gpu_type in reservations or option.num_gpus > capacity.get(option.gpu_type, 0):
                continue
            wait_s = self._expected_wait_s(option, index, releases, claimed, reservations,
                                           now_s)
            if best is None or wait_s + option.duration_s < best[0]:
                best = (wait_s + option.duration_s, wait_s, option)
        if best is None:
            return False
        _, wait_s, option = best
        gpu_type = option.gpu_type
        free_at_shadow = index.free_by_type.get(gpu_type, 0)
        if wait_s < INF and wait_s > 0:
            cum = releases.cumulative[gpu_type]
            free_at_shadow += cum[bisect.bisect_right(releases.ends[gpu_type], now_s + wait_s) - 1]
        reservations[gpu_type] = _Reservation(
            now_s + wait_s if wait_s < INF else INF,
            max(0, free_at_shadow - claimed.get(gpu_type, 0) - option.num_gpus))
        claimed[gpu_type] = claimed.get(gpu_type, 0) + option.num_gpus
        return True
