"""Tenants' views and limits over the orchestrator's jobs (pure; no I/O).

A user sees and acts on its own tenant's jobs only; an admin sees all. A job of another tenant
answers exactly like a job that does not exist (NOT_FOUND), so a caller learns nothing about
ids it does not own.
"""
from __future__ import annotations

import os
import sys
from typing import Iterable

from frenzy.jobstates import HOLDING, WAITING
from frenzy.security.store import Identity, TenantPolicy
from frenzy.v1 import services_pb2, types_pb2

# The reference trainer and the synthetic workload: what an empty entrypoint runs, and the
# trainer given explicitly (examples/jobs/*.yaml).
BUILTIN_MODULES = ("frenzy_trainer", "frenzy_agent.workload")


def can_see(who: Identity, job: types_pb2.Job) -> bool:
    return who.is_admin or job.tenant == who.tenant


def visible(who: Identity, jobs: Iterable[types_pb2.Job]) -> list[types_pb2.Job]:
    return [j for j in jobs if can_see(who, j)]


def scoped_nodes(who: Identity, nodes: list[types_pb2.Node],
                 owner: dict[str, str]) -> list[types_pb2.Node]:
    """Nodes with other tenants' job ids blanked (owner: job id -> tenant)."""
    if who.is_admin:
        return nodes
    for node in nodes:
        mine = [j for j in node.running_jobs if owner.get(j.split(":")[0]) == who.tenant]
        del node.running_jobs[:]
        node.running_jobs.extend(mine)
        for gpu in node.gpus:
            if gpu.job_id and owner.get(gpu.job_id) != who.tenant:
                gpu.job_id = ""
    return nodes


def scoped_summary(who: Identity, summary: services_pb2.ClusterSummary,
                   jobs: Iterable[types_pb2.Job]) -> services_pb2.ClusterSummary:
    """GPU totals stay (capacity is not a secret); job counts are the caller's own."""
    if who.is_admin:
        return summary
    mine = [j for j in jobs if j.tenant == who.tenant]
    for s in summary.gpu_types:
        s.running_jobs = sum(1 for j in mine if j.state in HOLDING and j.option.gpu_type == s.gpu_type)
        s.queued_jobs = sum(1 for j in mine if j.state == types_pb2.QUEUED)
    return summary


def gpus_in_use(tenant: str, jobs: Iterable[types_pb2.Job]) -> int:
    return sum(j.option.num_gpus for j in jobs if j.tenant == tenant and j.state in HOLDING)


def quota_problem(tenant: str, policy: TenantPolicy, spec: types_pb2.JobSpec,
                  jobs: Iterable[types_pb2.Job]) -> str:
    """Why a new job of this tenant is refused at submission, or ""."""
    jobs = list(jobs)
    if policy.max_queued_jobs:
        waiting = sum(1 for j in jobs if j.tenant == tenant and j.state in WAITING)
        if waiting >= policy.max_queued_jobs:
            return (f"quota: tenant {tenant!r} has {waiting} queued jobs, the most it may have "
                    f"is {policy.max_queued_jobs}")
    if policy.max_gpus:
        floor = max(spec.constraints.min_gpus, 1)
        if floor > policy.max_gpus:
            return (f"quota: the job needs at least {floor} GPUs, tenant {tenant!r} may use at "
                    f"most {policy.max_gpus}")
    return ""


def placement_quota_problem(tenant: str, policy: TenantPolicy, num_gpus: int,
                            jobs: Iterable[types_pb2.Job]) -> str:
    """Why placing num_gpus more GPUs for this tenant would break its GPU quota, or ""."""
    if not policy.max_gpus:
        return ""
    used = gpus_in_use(tenant, jobs)
    if used + num_gpus > policy.max_gpus:
        return f"quota: tenant {tenant!r} uses {used} GPUs; {num_gpus} more exceeds {policy.max_gpus}"
    return ""


def entrypoint_problem(entrypoint: list[str], policy: TenantPolicy) -> str:
    """Why a tenant may not run this argv, or "".

    Allowed: empty (the synthetic workload), the reference trainer (`python -m frenzy_trainer`,
    with this installation's interpreter or a bare `python`), or an argv[0] on the tenant's
    allow-list. The argv is executed as a list, never through a shell.
    """
    if not entrypoint:
        return ""
    exe = entrypoint[0]
    pythons = {sys.executable, os.path.basename(sys.executable), "python", "python3"}
    if exe in pythons and len(entrypoint) >= 3 and entrypoint[1] == "-m" and \
            entrypoint[2] in BUILTIN_MODULES:
        return ""
    if exe in policy.entrypoints or "*" in policy.entrypoints:
        return ""
    return (f"{exe[:200]!r} is not allowed for this tenant: use the reference trainer "
            f"(python -m frenzy_trainer) or ask an admin to add it (frenzy tenant set "
            f"--allow-entrypoint)")
