"""The JCT floor (`simulator.bounds`): worked by hand, exact for a lone job, and never beaten by
any policy under the realism costs, reshapes and node failures included."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.clusterfile import NodeGroup, build_cluster
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.policies import get_policy, policy_names
from frenzy_scheduler.simulator import AvailabilityEvent, SimConfig, SimJob, simulate
from frenzy_scheduler.simulator.bounds import fewest_nodes, least_jct_s, least_jcts_s
from test_simulator_engine import node_failures

GROUPS = [NodeGroup("A100-80GB", 8, 2), NodeGroup("T4", 2, 2), NodeGroup("V100-32GB", 4, 1)]
CLUSTER = FreeIndex(build_cluster(GROUPS))  # nodes of 8 A100s, 2 T4s, 4 V100s; 16, 4, 4 GPUs


def job(job_id: str, submit_s: float, *options: tuple[str, int, float]) -> SimJob:
    return SimJob(job_id, submit_s, tuple(PlanOption(t, ParallelPlan(dp=n), 1, 1.0, d)
                                          for t, n, d in options), "gpt2", 1, 1.0)


def test_the_floor_is_the_best_option_with_its_launch_on_the_fewest_nodes() -> None:
    config = SimConfig(launch_overhead_s=60.0)  # no duration error: factor 1
    lone = job("j", 0.0,
               ("A100-80GB", 4, 1000.0),  # one node: 60 + 1000
               ("A100-80GB", 16, 300.0),  # two nodes at least: 60 x (1 + log2 2) + 300 = 420
               ("T4", 8, 10.0),           # wider than the cluster's T4s: cannot run
               ("H100-80GB", 1, 5.0))     # a type the cluster lacks: cannot run
    assert fewest_nodes(16, 8) == 2 and fewest_nodes(3, 8) == 1 and fewest_nodes(9, 4) == 3
    assert least_jct_s(lone, config, CLUSTER) == 420.0
    nowhere = job("k", 0.0, ("H100-80GB", 1, 5.0))
    assert least_jct_s(nowhere, config, CLUSTER) == math.inf
    assert least_jcts_s([lone, nowhere], config, CLUSTER) == {"j": 420.0}
    # the duration error scales the run, not the launch
    noisy = SimConfig(launch_overhead_s=60.0, duration_error_sigma=0.3, seed=7)
    assert least_jct_s(lone, noisy, CLUSTER) == \
        min(60.0 + 1000.0 * noisy.error_factor("j"), 120.0 + 300.0 * noisy.error_factor("j"))


def test_a_lone_job_on_its_one_option_finishes_exactly_at_its_floor() -> None:
    config = SimConfig.realistic(seed=2)
    lone = job("j", 50.0, ("A100-80GB", 16, 3000.0))
    # Not `frenzy`, which fills nodes by (idle GPUs ascending, FLOPs descending) as the public
    # code does, so it starts on the small T4 nodes and is timed at their speed (docs/has.md);
    # nor elastic `sia`, which starts the job at its next 60 s round
    for name in ("fifo", "frenzy-narrow", "sia-static", "has"):
        record = simulate([lone], build_cluster(GROUPS), get_policy(name), config=config).records[0]
        assert math.isclose(record.end_time_s - record.submit_time_s,
                            least_jct_s(lone, config, CLUSTER), rel_tol=1e-9), name


@st.composite
def contended(draw: st.DrawFn) -> tuple[list[SimJob], list[AvailabilityEvent]]:
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        work_s = draw(st.floats(100.0, 20_000.0))
        gpu_type = draw(st.sampled_from(sorted(CLUSTER.node_size)))
        counts = draw(st.sampled_from([(1,), (1, 2), (1, 2, 4), (2, 4, 8), (1, 2, 4, 8, 16)]))
        options = [(gpu_type, n, work_s / n ** 0.8) for n in counts]
        if draw(st.booleans()):  # a second, slower type
            options += [("V100-32GB", n, 2.5 * work_s / n ** 0.8) for n in counts if n <= 4]
        jobs.append(job(f"j{i}", draw(st.floats(0.0, 3000.0)), *options))
    return jobs, node_failures(draw)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended())
def test_no_policy_finishes_a_job_before_its_floor(workload) -> None:
    """Every policy that runs options of the job's menu, the elastic ones included, with node
    failures and the realism costs: no finished job's JCT is below its floor. A bound the
    engine could beat (a launch it did not charge, a run faster than the fastest option) would
    fail here. Not `frenzy`: its public code may run a plan on a type MARP gave no option for,
    timed by peak FLOPs, and across node types (`frenzy.timed_option`), off the menu."""
    jobs, events = workload
    config = SimConfig.realistic(launch_overhead_s=30.0, restart_overhead_s=20.0, seed=3)
    floors = least_jcts_s(jobs, config, CLUSTER)
    for name in set(policy_names()) - {"frenzy"}:
        result = simulate(jobs, build_cluster(GROUPS), get_policy(name), availability=events,
                          config=config)
        for record in result.records:
            if not math.isnan(record.end_time_s):
                jct_s = record.end_time_s - record.submit_time_s
                assert jct_s >= floors[record.job_id] * (1 - 1e-9), (name, record.job_id)
