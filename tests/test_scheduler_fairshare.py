"""Tenants' fair share and GPU quotas around the scheduler's policies (pure)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_scheduler.core import RunningJob
from frenzy_scheduler.fairshare import FairSharePolicy, TenantShare
from frenzy_scheduler.policies import get_policy, policy_names
from test_scheduler_policies import job, nodes, option, scenarios


def tenant_of(job_id: str) -> str:
    return "a" if job_id.startswith(("a", "j0", "j2", "j4", "j6", "j8")) else "b"


def fair(policy: str, **shares: TenantShare) -> FairSharePolicy:
    return FairSharePolicy(get_policy(policy), tenant_of, lambda: shares)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(policy_names()), st.integers(0, 8), st.integers(0, 8))
def test_placements_stay_valid_and_within_quota(scenario, name, quota_a, quota_b) -> None:
    queue, cluster = scenario
    policy = fair(name, a=TenantShare(2.0, quota_a), b=TenantShare(1.0, quota_b))
    placed = policy.schedule(queue, cluster, 0.0, [])
    view = cluster.copy()
    used = {"a": 0, "b": 0}
    for p in placed:
        view.take(p.assignments)  # raises on a double booking or a busy GPU
        used[tenant_of(p.job_id)] += p.option.num_gpus
    assert len({p.job_id for p in placed}) == len(placed)
    assert not quota_a or used["a"] <= quota_a
    assert not quota_b or used["b"] <= quota_b


def test_one_tenant_sees_exactly_the_inner_policy() -> None:
    queue = [job("a1", 0, option("T4", 2, 100)), job("a2", 1, option("T4", 4, 50))]
    cluster = nodes({"n0": ("T4", 8, range(8))})
    assert fair("has").schedule(queue, cluster, 0.0) == get_policy("has").schedule(queue, cluster, 0.0)


def test_the_tenant_below_its_weighted_share_goes_first() -> None:
    # 8 GPUs, weights a:b = 3:1, so a's share is 6 GPUs. b already holds 4 (over its 2).
    cluster = nodes({"n0": ("T4", 8, [4, 5, 6, 7])})
    running = [RunningJob("b-old", option("T4", 4, 100), (("n0", (0, 1, 2, 3)),), 0.0, 100.0)]
    queue = [job("b-new", 0.0, option("T4", 4, 10)), job("a-new", 5.0, option("T4", 4, 10))]
    placed = fair("fifo", a=TenantShare(3.0), b=TenantShare(1.0)).schedule(queue, cluster, 6.0, running)
    assert [p.job_id for p in placed] == ["a-new"]  # fifo alone would run b-new (earlier)
    assert [p.job_id for p in get_policy("fifo").schedule(queue, cluster, 6.0, running)] == ["b-new"]


def test_free_gpus_still_go_to_a_tenant_over_its_share() -> None:
    cluster = nodes({"n0": ("T4", 8, range(8))})
    queue = [job("b1", 0.0, option("T4", 4, 10)), job("b2", 1.0, option("T4", 4, 10)),
             job("a1", 2.0, option("T4", 8, 10))]
    placed = fair("fifo", a=TenantShare(1.0), b=TenantShare(1.0)).schedule(queue, cluster, 3.0)
    # Each share is 4 GPUs: b1 fits b's; a1 (8) cannot run now; b2 then takes what is left.
    assert [p.job_id for p in placed] == ["b1", "b2"]
    assert sum(p.option.num_gpus for p in placed) == 8  # nothing idles while a job fits


def test_a_gpu_quota_keeps_a_tenant_waiting_even_on_an_idle_cluster() -> None:
    cluster = nodes({"n0": ("T4", 8, range(8))})
    queue = [job("a1", 0.0, option("T4", 4, 10), option("T4", 2, 20))]
    placed = fair("fifo", a=TenantShare(1.0, max_gpus=2)).schedule(queue, cluster, 0.0)
    assert [p.option.num_gpus for p in placed] == [2]  # the 4-GPU option is over quota
    assert fair("fifo", a=TenantShare(1.0, max_gpus=1)).schedule(queue, cluster, 0.0) == []


class _Elastic:
    """An elastic inner policy's answer, fixed: grow a-old to 6 GPUs, preempt b-old, place a-new."""

    name, round_s = "stub", 30.0

    def schedule(self, queue, cluster, now_s, running=()):
        from frenzy_scheduler.core import PLACE, PREEMPT, RESIZE, Placement
        grow = Placement("a-old", option("T4", 6, 10), (("n0", (0, 1, 2, 3, 4, 5)),), RESIZE)
        out = [grow, Placement("b-old", option("T4", 2, 10), (), PREEMPT)]
        return out + [Placement(j.job_id, j.options[0], (("n0", (6, 7)),), PLACE) for j in queue][:1]


def test_an_elastic_policys_reshapes_pass_through_and_growth_keeps_the_quota() -> None:
    """The live scheduler wraps its (optionally elastic) policy in FairSharePolicy."""
    cluster = nodes({"n0": ("T4", 8, [])})
    running = [RunningJob("a-old", option("T4", 2, 100), (("n0", (0, 1)),), 0.0, 100.0),
               RunningJob("b-old", option("T4", 2, 100), (("n0", (2, 3)),), 0.0, 100.0)]
    queue = [job("a-new", 0.0, option("T4", 2, 10))]
    free = FairSharePolicy(_Elastic(), tenant_of, lambda: {})
    assert free.round_s == 30.0
    assert sorted((p.job_id, p.kind) for p in free.schedule(queue, cluster, 1.0, running)) == [
        ("a-new", "place"), ("a-old", "resize"), ("b-old", "preempt")]
    capped = FairSharePolicy(_Elastic(), tenant_of, lambda: {"a": TenantShare(1.0, max_gpus=4)})
    # a holds 2; a-new takes 2 more (at the quota), so growing a-old by 4 is dropped.
    assert sorted((p.job_id, p.kind) for p in capped.schedule(queue, cluster, 1.0, running)) == [
        ("a-new", "place"), ("b-old", "preempt")]
