"""Weighted max-min sharing of GPUs between tenants, around any policy (pure).

`FairSharePolicy` wraps a policy (fifo, has, ...) and changes only which jobs it sees:
1. quotas: an option that would take a tenant past its `max_gpus` is removed; a job with no
   option left waits;
2. under contention (jobs of two or more tenants waiting), each tenant's fair share is the
   cluster's GPUs times its weight over the weights of the tenants that run or wait. The
   policy first sees only the jobs of tenants below their share, and of what it places each
   such tenant keeps, in the policy's own order, what fits in the rest of its share (at least
   one job, so a job larger than the share is not starved);
3. the GPUs still free then go to everyone else's jobs (work conserving: no GPU idles while a
   job that fits it waits).

Without preemption, a tenant that arrives when the cluster is full gets its share as running
jobs end, not at once. An elastic inner policy's reshapes of running jobs (resize, migrate,
preempt) pass through, the first per job; a resize that would take its tenant past its quota
is dropped (only growth can, and growth frees no GPU another action relies on). This is weighted max-min fairness at job granularity over GPU counts;
DRF (Ghodsi et al., NSDI'11) reduces to it with one resource type. The policy's own order
(e.g. HAS's) decides among the jobs it is shown.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from frenzy_scheduler.core import PLACE, ClusterView, Placement, Policy, QueuedJob, RunningJob


@dataclass(frozen=True)
class TenantShare:
    weight: float = 1.0
    max_gpus: int = 0  # 0: no quota


class FairSharePolicy:
    def __init__(self, inner: Policy, tenant_of: Callable[[str], str],
                 shares: Callable[[], Mapping[str, TenantShare]]) -> None:
        self.inner = inner
        self.name = f"{inner.name}+fair"
        self.tenant_of = tenant_of
        self.shares = shares
        self.round_s = getattr(inner, "round_s", 0.0)

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        shares = self.shares()
        share = lambda t: shares.get(t, TenantShare())  # noqa: E731
        used: Counter = Counter()
        for r in running:
            used[self.tenant_of(r.job_id)] += r.num_gpus
        reshapes: dict[str, Placement] = {}  # job id -> the inner policy's first reshape of it

        def inner(jobs: Sequence[QueuedJob], view: ClusterView,
                  now_running: Sequence[RunningJob]) -> list[Placement]:
            actions = self.inner.schedule(jobs, view, now_s, now_running)
            for a in actions:
                if a.kind != PLACE:
                    reshapes.setdefault(a.job_id, a)
            return [a for a in actions if a.kind == PLACE]

        placed = self._schedule(queue, cluster, now_s, running, used, share, inner)
        return placed + self._reshapes_within_quota(list(reshapes.values()), running, used, share)

    def _schedule(self, queue, cluster, now_s, running, used, share, inner) -> list[Placement]:
        eligible = self._within_quota_options(queue, used, share)
        waiting = {self.tenant_of(j.job_id) for j in eligible}
        if len(waiting) <= 1:
            placed = inner(eligible, cluster, running) if eligible or running else []
            return self._within_quota(placed, used, share)
        total_gpus = sum(cluster.total_by_type().values())
        active = waiting | {t for t, gpus in used.items() if gpus > 0}
        weights = sum(share(t).weight for t in active)
        fair_gpus = {t: total_gpus * share(t).weight / weights for t in active}
        below = {t for t in waiting if used[t] < fair_gpus[t]}
        first = [j for j in eligible if self.tenant_of(j.job_id) in below]
        proposed = inner(first, cluster, running) if first else []
        placed = self._within_quota(self._within_share(proposed, used, fair_gpus), used, share)
        taken = {p.job_id for p in placed}
        rest = self._within_quota_options([j for j in eligible if j.job_id not in taken], used, share)
        if not rest:
            return placed
        left = cluster.copy()  # what the first pass left free goes to everyone else
        for p in placed:
            left.take(p.assignments)
        now_running = list(running) + [RunningJob(p.job_id, p.option, p.assignments, now_s,
                                                  now_s + p.option.duration_s) for p in placed]
        return placed + self._within_quota(inner(rest, left, now_running), used, share)

    def _reshapes_within_quota(self, reshapes: list[Placement], running: Sequence[RunningJob],
                               used: Counter, share: Callable[[str], TenantShare]) -> list[Placement]:
        held = {r.job_id: r.num_gpus for r in running}
        kept = []
        for p in reshapes:
            tenant = self.tenant_of(p.job_id)
            limit = share(tenant).max_gpus
            delta = sum(len(g) for _, g in p.assignments) - held.get(p.job_id, 0)
            if limit and delta > 0 and used[tenant] + delta > limit:
                continue
            used[tenant] += delta
            kept.append(p)
        return kept

    def _within_share(self, placements: list[Placement], used: Counter,
                      fair_gpus: Mapping[str, float]) -> list[Placement]:
        """In the policy's own order, each tenant's placements up to what is left of its share
        (at least one, so that a job larger than the share is not starved)."""
        kept, room = [], {t: fair_gpus[t] - used[t] for t in fair_gpus}
        took: set[str] = set()
        for p in placements:
            tenant = self.tenant_of(p.job_id)
            if p.option.num_gpus > room.get(tenant, 0.0) and tenant in took:
                continue
            room[tenant] = room.get(tenant, 0.0) - p.option.num_gpus
            took.add(tenant)
            kept.append(p)
        return kept

    def _within_quota_options(self, jobs: Sequence[QueuedJob], used: Counter,
                              share: Callable[[str], TenantShare]) -> list[QueuedJob]:
        """Jobs with only the options their tenant's GPU quota still allows; none: left out."""
        out = []
        for job in jobs:
            tenant = self.tenant_of(job.job_id)
            limit = share(tenant).max_gpus
            options = [o for o in job.options if not limit or used[tenant] + o.num_gpus <= limit]
            if options:
                out.append(job if len(options) == len(job.options) else replace(job, options=options))
        return out

    def _within_quota(self, placements: list[Placement], used: Counter,
                      share: Callable[[str], TenantShare]) -> list[Placement]:
        """A policy may place several jobs of one tenant in one call: keep its quota, and count
        what is kept in `used`."""
        kept = []
        for p in placements:
            tenant = self.tenant_of(p.job_id)
            limit = share(tenant).max_gpus
            if limit and used[tenant] + p.option.num_gpus > limit:
                continue
            used[tenant] += p.option.num_gpus
            kept.append(p)
        return kept
