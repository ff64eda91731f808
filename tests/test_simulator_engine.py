"""The discrete-event simulator: every fitting job completes, events drive decisions, workload mapping."""
from __future__ import annotations

import gc
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy.config import ServiceSettings
from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.clusterfile import NodeGroup, build_cluster
from frenzy_scheduler.core import RESIZE, Placement
from frenzy_scheduler.policies import get_policy, policy_names
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from frenzy_scheduler.simulator import (AvailabilityEvent, SimConfig, SimJob, WorkloadMapper, load_trace,
                                        prepare_jobs, scale_arrivals, select_window, simulate,
                                        summarize)
from frenzy_scheduler.simulator.metrics import offered_load, slowest_mean
from frenzy_scheduler.simulator.trace import TraceJob
from frenzy_scheduler.simulator.workload import global_batch_for, restart_overhead_s

TRACE = "tests/data/trace_philly_150.csv"
GROUPS = [NodeGroup("A100-80GB", 8, 1), NodeGroup("T4", 2, 2), NodeGroup("V100-32GB", 4, 1)]


def sim_job(job_id: str, submit_s: float, *opts: tuple[str, int, float]) -> SimJob:
    options = tuple(PlanOption(t, ParallelPlan(dp=n), 1, 1.0, d) for t, n, d in opts)
    return SimJob(job_id, submit_s, options, "gpt2", 1, 1.0)


@st.composite
def workloads(draw: st.DrawFn) -> list[SimJob]:
    jobs = []
    for i in range(draw(st.integers(1, 25))):
        count = draw(st.sampled_from([1, 2, 4, 8, 16]))  # 16 GPUs fits no single type: unschedulable
        types = draw(st.sets(st.sampled_from(["A100-80GB", "T4", "V100-32GB", "H100-80GB"]), min_size=1))
        base = draw(st.floats(1.0, 1000.0))
        opts = [(t, count, base * (1 + k)) for k, t in enumerate(sorted(types))]
        jobs.append(sim_job(f"j{i}", draw(st.floats(0.0, 500.0)), *opts))
    return jobs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_job_that_fits_completes_under_every_policy(jobs: list[SimJob]) -> None:
    capacity = build_cluster(GROUPS).total_by_type()
    fits = {j.job_id for j in jobs
            if any(o.num_gpus <= capacity.get(o.gpu_type, 0) and
                   (o.gpu_type != "T4" or o.num_gpus <= 2 or o.num_gpus % 2 == 0) for o in j.options)}
    for name in policy_names():
        result = simulate(jobs, build_cluster(GROUPS), get_policy(name))
        finished = {r.job_id for r in result.records if not math.isnan(r.end_time_s)}
        assert finished == fits, name
        assert set(result.unschedulable) == {j.job_id for j in jobs} - fits, name
        assert not result.stranded, name
        for r in result.records:
            # a job runs exactly its option's duration, after submission (unless it was
            # reshaped, or frenzy spanned memory tiers and timed it at the slowest node)
            if r.job_id in finished:
                assert r.start_time_s >= r.submit_time_s
                assert r.restarts or name == "frenzy" or any(math.isclose(r.end_time_s - r.start_time_s, o.duration_s)
                           for o in next(j for j in jobs if j.job_id == r.job_id).options)


def test_policy_is_called_on_events_only() -> None:
    jobs = [sim_job("a", 0.0, ("T4", 1, 100.0)), sim_job("b", 0.0, ("T4", 1, 50.0)),
            sim_job("c", 1000.0, ("T4", 1, 10.0))]
    result = simulate(jobs, build_cluster([NodeGroup("T4", 1, 1)]), get_policy("fifo"))
    # decisions: t=0 (two arrivals, one call), t=100 (a done), t=150 (b done; queue empty: no
    # call), t=1000 (c arrives) -> 3 calls, however long the idle gaps are
    assert len(result.decision_times_s) == 3
    ends = {r.job_id: r.end_time_s for r in result.records}
    assert ends == {"a": 100.0, "b": 150.0, "c": 1010.0}


class NotBefore:
    """fifo that starts job b (every job with `every`) not before `from_s`: a decision that
    changes with time alone."""

    name = "not-before"
    round_s = 0.0

    def __init__(self, from_s: float, every: bool = False) -> None:
        self.from_s, self.every, self.asked_at = from_s, every, []

    def schedule(self, queue, cluster, now_s, running=()):
        self.asked_at.append(now_s)
        ready = [j for j in queue if now_s >= self.from_s or not (self.every or j.job_id == "b")]
        return get_policy("fifo").schedule(ready, cluster, now_s, running)


def test_a_waiting_queue_is_decided_again_as_the_live_scheduler_does() -> None:
    """Live, the scheduler asks its policy again every FRENZY_SCHEDULER_REDECIDE_S while jobs
    wait (`SchedulerService.redecide_loop`); the realistic simulator does the same, counted from
    the last decision. Without it, b would wait for a's end, the next event."""
    jobs = [sim_job("a", 0.0, ("T4", 1, 1000.0)), sim_job("b", 10.0, ("T4", 1, 50.0))]
    cluster = [NodeGroup("T4", 1, 2)]
    for redecide_s, asked_at, b_start_s in ((0.0, [0.0, 10.0, 1000.0], 1000.0),
                                            (60.0, [0.0, 10.0, 70.0, 130.0], 130.0)):
        policy = NotBefore(from_s=100.0)
        result = simulate(jobs, build_cluster(cluster), policy,
                          config=SimConfig(redecide_s=redecide_s))
        assert policy.asked_at == asked_at, redecide_s  # nothing waits after b starts: no more
        assert {r.job_id: r.start_time_s for r in result.records}["b"] == b_start_s
    assert SimConfig.realistic().redecide_s == ServiceSettings().scheduler_redecide_s == 60.0
    # A queue that nothing can move any more (nothing runs, the answer did nothing) is not
    # asked for ever: the run ends with the job stranded
    result = simulate([sim_job("c", 0.0, ("T4", 1, 10.0))], build_cluster(cluster),
                      NotBefore(math.inf, every=True), config=SimConfig(redecide_s=60.0))
    assert result.stranded == ["c"]


def test_node_failure_restarts_its_jobs_elsewhere() -> None:
    jobs = [sim_job("a", 0.0, ("T4", 2, 100.0))]
    cluster = build_cluster([NodeGroup("T4", 2, 2)])
    down = AvailabilityEvent(40.0, "t4-0", up=False)
    result = simulate(jobs, cluster, get_policy("has"), availability=[down])
    record = result.records[0]
    assert record.restarts == 1 and result.restarts == 1
    assert record.start_time_s == 40.0 and record.end_time_s == 140.0


def test_has_aging_prevents_starvation_in_simulation() -> None:
    # A big job needs the whole node; a stream of short jobs keeps one GPU busy all the time.
    stream = [sim_job(f"s{i}", 10.0 * i, ("A100-80GB", 1, 15.0)) for i in range(400)]
    jobs = [sim_job("s-first", 0.0, ("A100-80GB", 1, 15.0)),
            sim_job("big", 1.0, ("A100-80GB", 2, 500.0))] + stream
    cluster = [NodeGroup("A100-80GB", 2, 1)]
    # Aging puts the big job first; once it has waited reserve_after_s it reserves the node and
    # short jobs may only backfill if they end before it can start.
    aged = simulate(jobs, build_cluster(cluster),
                    HasPolicy(HasConfig(aging_rate=1.0, reserve_after_s=300.0)))
    starved = simulate(jobs, build_cluster(cluster),
                       HasPolicy(HasConfig(aging_rate=0.0, reserve_after_s=math.inf)))
    big = lambda result: next(r for r in result.records if r.job_id == "big")  # noqa: E731
    assert big(aged).first_start_s < 600.0
    assert big(starved).first_start_s > 3900.0  # control: runs only once the stream ends


def test_workload_mapping_is_seeded_and_calibrated_on_the_reference_type() -> None:
    trace = [TraceJob("x", 0.0, 3600.0, 1), TraceJob("y", 10.0, 7200.0, 8)]
    mapper = WorkloadMapper(["A100-80GB", "T4"], seed=3)
    first, again = mapper.map_jobs(trace), WorkloadMapper(["A100-80GB", "T4"], seed=3).map_jobs(trace)
    assert [j.model for j in first] == [j.model for j in again]
    assert all(o.gpu_type in ("A100-80GB", "T4") for j in first for o in j.options)
    reference = WorkloadMapper(["V100-32GB"], seed=3).map_job(trace[0])
    v100_1gpu = [o for o in reference.options if o.num_gpus == 1]
    assert v100_1gpu and math.isclose(min(o.duration_s for o in v100_1gpu), 3600.0)


def test_trace_window_and_load_scaling() -> None:
    trace = load_trace(TRACE)
    assert len(trace) == 150 and trace[0].submit_time_s == 0.0
    window = select_window(trace, start_s=trace[10].submit_time_s, count=20)
    assert len(window) == 20 and window[0].job_id == trace[10].job_id
    jobs = prepare_jobs(trace, GROUPS, count=60, seed=1)
    capacity = build_cluster(GROUPS).total_by_type()
    scaled = scale_arrivals(jobs, capacity, 0.8)
    assert math.isclose(offered_load(scaled, capacity), 0.8, rel_tol=1e-3)
    metrics = summarize(simulate(scaled, build_cluster(GROUPS), get_policy("has")))
    assert metrics["completed"] + metrics["unschedulable"] == 60


# -- realism: every policy pays the same costs ------------------------------------------------

REALISTIC = SimConfig.realistic(seed=7)


def test_work_is_preserved_from_the_trace() -> None:
    """On the trace's own GPU type and count, the mapped jobs' median predicted duration is
    within 2x of the trace's median (the calibration makes it exact where MARP has that count)."""
    trace = load_trace(TRACE)[:60]
    mapper = WorkloadMapper(["V100-32GB", "A100-80GB"], seed=0, node_sizes={"V100-32GB": 8})
    ratios = []
    for trace_job, job in zip(trace, mapper.map_jobs(trace)):
        own = [o.duration_s for o in job.options
               if o.gpu_type == "V100-32GB" and o.num_gpus == trace_job.num_gpus]
        if own:
            ratios.append(min(own) / trace_job.duration_s)
    assert len(ratios) >= 40
    ratios.sort()
    assert 0.5 <= ratios[len(ratios) // 2] <= 2.0


def test_dp_width_is_bounded_by_the_global_batch_and_plans_follow_node_sizes() -> None:
    trace = [TraceJob("one", 0.0, 3600.0, 1), TraceJob("eight", 0.0, 3600.0, 8)]
    mapper = WorkloadMapper(["T4", "A100-80GB"], seed=0, node_sizes={"T4": 2, "A100-80GB": 8})
    for job in mapper.map_jobs(trace):
        assert job.global_batch == global_batch_for(job.trace_gpus)
        for o in job.options:
            assert o.plan.dp * o.plan.micro_batch <= job.global_batch
            if o.gpu_type == "T4":
                assert o.plan.tp <= 2  # a T4 node here has 2 GPUs, not the catalogue's 4
    assert max(o.plan.dp for o in mapper.map_job(trace[0]).options) <= global_batch_for(1)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.text(min_size=1, max_size=8))
def test_same_seed_gives_every_policy_the_same_errors(seed: int, job_id: str) -> None:
    config = SimConfig.realistic(seed=seed)
    assert config.error_factor(job_id) == SimConfig.realistic(seed=seed).error_factor(job_id)
    assert config.error_factor(job_id) > 0


def test_engine_runs_the_true_duration_with_overheads_for_every_policy() -> None:
    jobs = [sim_job(f"j{i}", 100.0 * i, ("A100-80GB", 1, 1000.0)) for i in range(4)]
    for name in ("fifo", "frenzy", "sia", "has"):
        result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), get_policy(name),
                          config=REALISTIC)
        for r in result.records:  # the cluster is never full: one run each, no restart
            expected = REALISTIC.launch_s(1) + 1000.0 * REALISTIC.error_factor(r.job_id)
            assert math.isclose(r.end_time_s - r.start_time_s, expected), name
            assert r.restarts == 0


def test_launch_overhead_grows_with_nodes_spanned() -> None:
    assert REALISTIC.launch_s(1) == 60.0
    assert REALISTIC.launch_s(1) < REALISTIC.launch_s(2) < REALISTIC.launch_s(8)


def test_restart_cost_follows_model_size_in_sias_range() -> None:
    assert restart_overhead_s(124_000_000) < restart_overhead_s(7_000_000_000)
    assert 25.0 <= restart_overhead_s(10**8) and restart_overhead_s(7 * 10**10) == 250.0


def test_node_failure_loses_only_the_work_since_the_last_checkpoint() -> None:
    jobs = [sim_job("a", 0.0, ("T4", 2, 10_000.0))]
    config = SimConfig(checkpoint_interval_s=1000.0, restart_overhead_s=50.0)
    down = AvailabilityEvent(2500.0, "t4-0", up=False)
    result = simulate(jobs, build_cluster([NodeGroup("T4", 2, 2)]), get_policy("has"),
                      availability=[down], config=config)
    record = result.records[0]
    # 2,000 s kept at the last checkpoint, 500 s lost; resumed at 2,500 with a 50 s restore
    assert record.restarts == 1
    assert math.isclose(record.end_time_s, 2500.0 + 50.0 + 8000.0)
    assert math.isclose(record.work_done - record.work_lost, 1.0)
    assert math.isclose(record.work_lost, 0.05)


def test_restore_on_first_start_charges_every_start_as_sias_simulator_does() -> None:
    """Sia's simulator charges its restore on the first start too (bench/sia_crosscheck.py):
    one flat cost per start, and a resume pays it once, not a launch plus a restore."""
    config = SimConfig(restart_overhead_s=50.0, restore_on_first_start=True)
    jobs = [scaling_job("lone", 0.0, 32_000.0), sim_job("small", 0.0, ("A100-80GB", 4, 600.0))]
    result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), get_policy("sia"),
                      config=config)
    small = next(r for r in result.records if r.job_id == "small")
    lone = next(r for r in result.records if r.job_id == "lone")
    assert small.end_time_s == 50.0 + 600.0 and small.restarts == 0
    # 'lone' ran 4 GPUs from 50 s; grown at the round at 660 s, it restores 50 s once more
    assert lone.restarts == 1 and lone.start_time_s == 660.0
    done = 610.0 / 8000.0
    assert math.isclose(lone.end_time_s, 660.0 + 50.0 + 4000.0 * (1 - done))


# -- elastic policies -------------------------------------------------------------------------

def scaling_job(job_id: str, submit_s: float, work_s: float, counts=(1, 2, 4, 8),
                gpu_type: str = "A100-80GB") -> SimJob:
    """A job whose time falls linearly with its GPUs (duration work / n)."""
    return sim_job(job_id, submit_s, *((gpu_type, n, work_s / n) for n in counts))


def test_elastic_sia_grows_a_lone_job_into_an_idle_cluster() -> None:
    # t=0: 'lone' (1-8 GPUs) and 'small' (4 GPUs only) share the node 4 + 4 (cost 0.5 + 0.5
    # beats 8^-0.5 + lambda_n). 'small' ends at 600 s; the next round grows 'lone' to 8.
    jobs = [scaling_job("lone", 0.0, 32_000.0), sim_job("small", 0.0, ("A100-80GB", 4, 600.0))]
    result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), get_policy("sia"))
    lone = next(r for r in result.records if r.job_id == "lone")
    assert result.reshapes["resize"] == 1 and lone.restarts == 1
    assert lone.num_gpus == 8 and lone.start_time_s == 600.0  # the round at the completion
    # 600 s on 4 GPUs did 600 / 8000 of the work; the rest on 8 GPUs: 32000/8 x (1 - 0.075)
    assert math.isclose(lone.end_time_s, 600.0 + 4000.0 * (1 - 600.0 / 8000.0))
    assert math.isclose(lone.work_done, 1.0)


def test_elastic_has_grows_into_idle_gpus_and_gives_them_back_to_a_waiting_job() -> None:
    # 'lone' starts on its cheapest option (1 GPU); after the hysteresis interval the next
    # event lets it grow into the idle node. A job arriving later reclaims GPUs.
    config = HasConfig(reshape_interval_s=100.0, shrink_after_s=50.0, restart_floor_s=10.0,
                       grow_cost_limit=1.0)
    jobs = [scaling_job("lone", 0.0, 80_000.0), sim_job("tick", 200.0, ("A100-80GB", 1, 10.0)),
            sim_job("late", 5000.0, ("A100-80GB", 4, 1000.0))]
    result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), HasPolicy(config))
    records = {r.job_id: r for r in result.records}
    assert result.reshapes["resize"] >= 2  # grown, then shrunk for 'late'
    assert records["late"].first_start_s < 5000.0 + 200.0
    assert all(math.isclose(r.work_done - r.work_lost, 1.0) for r in result.records)


def test_has_displaces_a_long_job_for_a_short_one_and_moves_it_back_at_its_turn() -> None:
    # 'long' holds the only A100 node (10,000 s there, 30,000 s on the idle 3090s); 'new'
    # arrives at 1,000 s (1,000 s on the A100s, 20,000 s on the 3090s). Admission moves
    # 'long' to the 3090s and starts 'new' on its A100s, charging 'long' its slowdown over
    # the newcomer's run, because it keeps a place in line: when 'new' ends at 2,000 s (and
    # the 600 s guard has passed) 'long' moves back. JCTs 10,667 + 1,000 s. Counted to its
    # end instead (the rule before s32), 'long' stays and 'new' runs on the 3090s until the
    # A100s free at 10,000 s: 10,000 + 9,550 s.
    jobs = [sim_job("long", 0.0, ("A100-80GB", 4, 10_000.0), ("RTX-3090", 4, 30_000.0)),
            sim_job("new", 1000.0, ("A100-80GB", 4, 1000.0), ("RTX-3090", 4, 20_000.0))]
    groups = [NodeGroup("A100-80GB", 4, 1), NodeGroup("RTX-3090", 4, 1)]

    def records(config: HasConfig) -> dict[str, tuple[float, int, str]]:
        result = simulate(jobs, build_cluster(groups), HasPolicy(config))
        return {r.job_id: (round(r.end_time_s), r.restarts, r.gpu_type) for r in result.records}

    assert records(HasConfig()) == {"long": (10_667, 2, "A100-80GB"),
                                    "new": (2_000, 0, "A100-80GB")}
    assert records(HasConfig(displaced_return=False)) == {"long": (10_000, 0, "A100-80GB"),
                                                          "new": (10_550, 1, "A100-80GB")}


@st.composite
def elastic_workloads(draw: st.DrawFn) -> tuple[list[SimJob], list[AvailabilityEvent]]:
    jobs = []
    for i in range(draw(st.integers(1, 15))):
        work = draw(st.floats(100.0, 20_000.0))
        counts = draw(st.sampled_from([(1,), (1, 2), (1, 2, 4), (2, 4, 8), (1, 2, 4, 8)]))
        gpu_type = draw(st.sampled_from(["A100-80GB", "V100-32GB", "T4"]))
        jobs.append(scaling_job(f"j{i}", draw(st.floats(0.0, 3000.0)), work, counts, gpu_type))
    return jobs, node_failures(draw)


def node_failures(draw: st.DrawFn) -> list[AvailabilityEvent]:
    """Up to two of the test clusters' nodes leave, each coming back later."""
    events = [AvailabilityEvent(draw(st.floats(0.0, 5000.0)), node, up=False)
              for node in draw(st.sets(st.sampled_from(["a100-80gb-0", "t4-1", "v100-32gb-0"]),
                                       max_size=2))]
    return events + [AvailabilityEvent(e.time_s + draw(st.floats(1.0, 3000.0)), e.node_id,
                                       up=True) for e in events]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_workloads())
def test_no_double_booking_and_work_conserved_under_resize_migrate_preempt(workload) -> None:
    """Every policy, elastic ones included, with node failures and the realism costs: the
    engine refuses any double booking (it raises), GPUs in use never exceed the cluster, and
    every finished job did exactly its work once, net of work lost to failures."""
    jobs, events = workload
    groups = [NodeGroup("A100-80GB", 8, 1), NodeGroup("T4", 2, 2), NodeGroup("V100-32GB", 4, 1)]
    config = SimConfig.realistic(launch_overhead_s=30.0, restart_overhead_s=20.0, seed=3)
    policies = [get_policy(n) for n in policy_names()] + [HasPolicy(HasConfig(
        reshape_interval_s=60.0, shrink_after_s=10.0, restart_floor_s=5.0, min_gain_s=10.0))]
    for policy in policies:
        result = simulate(jobs, build_cluster(groups), policy, availability=events, config=config)
        points = sorted({t for s, e, _ in result.segments for t in (s, e)})
        for t in points:
            in_use = sum(g for s, e, g in result.segments if s <= t < e)
            assert in_use <= 8 + 4 + 4, policy.name
        for r in result.records:
            if not math.isnan(r.end_time_s):
                assert math.isclose(r.work_done - r.work_lost, 1.0, rel_tol=1e-6), policy.name
        assert not result.stranded, policy.name


def test_the_simulator_shows_policies_the_checkpoint_age_of_its_periodic_checkpoints() -> None:
    """The same fields as live: a running job's checkpoint age, from the checkpoints the engine
    charges a node failure with (every checkpoint_interval_s of productive time)."""
    ages: list[float] = []
    fifo = get_policy("fifo")

    class Recording:
        name, round_s = "recording", 0.0

        def schedule(self, queue, cluster, now_s, running=()):
            ages.extend(r.checkpoint_age_s(now_s) for r in running if r.job_id == "long")
            return fifo.schedule(queue, cluster, now_s, running)

    jobs = [sim_job("long", 0.0, ("A100-80GB", 1, 10_000.0)),
            sim_job("later", 4000.0, ("A100-80GB", 1, 10.0))]
    config = SimConfig(launch_overhead_s=100.0, checkpoint_interval_s=1800.0)
    simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), Recording(), config=config)
    assert ages[0] == (4000.0 - 100.0) % 1800.0  # productive since 100 s: saved at 1900, 3700


class _FreezeWatcher:
    """fifo, noting on each call whether the objects made before the run are frozen."""

    def __init__(self, made_before: object) -> None:
        self.inner, self.made_before, self.seen = get_policy("fifo"), made_before, []
        self.name = self.inner.name

    def schedule(self, queue, cluster, now_s, running=()):
        self.seen.append((gc.get_freeze_count(), gc.is_tracked(self.made_before),
                          any(o is self.made_before for o in gc.get_objects())))
        return self.inner.schedule(queue, cluster, now_s, running)


def test_the_run_keeps_the_collector_off_its_inputs_and_gives_the_caller_its_state_back() -> None:
    """The engine freezes what exists before a run (the collector would walk the trace's
    millions of objects at every full collection) and unfreezes it after; a caller's own
    freeze or disabled collector is left as it was. Decisions are the same either way."""
    jobs = [sim_job("a", 0.0, ("T4", 1, 100.0)), sim_job("b", 0.0, ("T4", 1, 50.0))]
    cluster = build_cluster([NodeGroup("T4", 1, 1)])
    assert gc.isenabled() and gc.get_freeze_count() == 0
    made_before = [object()]  # a tracked container
    watcher = _FreezeWatcher(made_before)
    result = simulate(jobs, cluster, watcher)
    # frozen during the run: out of every generation the collector walks
    assert all(count > 0 and tracked and not walked for count, tracked, walked in watcher.seen)
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    ends = {r.job_id: r.end_time_s for r in result.records}
    gc.freeze()  # the caller's own freeze stays as the caller left it
    try:
        watcher = _FreezeWatcher(made_before)
        again = simulate(jobs, cluster, watcher)
        assert gc.get_freeze_count() > 0  # not unfrozen by the run
        assert not any(o is made_before for o in gc.get_objects())
        assert {r.job_id: r.end_time_s for r in again.records} == ends
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        watcher = _FreezeWatcher(made_before)
        simulate(jobs, cluster, watcher)
        assert all(count == 0 for count, _, _ in watcher.seen)
        assert not gc.isenabled()
    finally:
        gc.enable()


class _CycleMaker:
    """fifo that leaves a reference cycle behind on every call, and notes on each call how many
    of those cycles have been collected so far and whether the automatic collector is on."""

    def __init__(self) -> None:
        self.inner, self.collected, self.seen = get_policy("fifo"), [0], []
        self.name = self.inner.name

    def schedule(self, queue, cluster, now_s, running=()):
        import weakref

        class Node:
            pass

        node = Node()
        node.self = node  # unreachable after this call; only the cyclic collector frees it
        weakref.finalize(node, self.collected.__setitem__, 0, self.collected[0] + 1)
        self.seen.append((self.collected[0], gc.isenabled()))
        return self.inner.schedule(queue, cluster, now_s, running)


def test_the_engine_collects_a_policys_cycles_during_the_run_with_the_automatic_collector_off():
    """The engine runs the cyclic collector itself (`_RunCollector`): a policy that makes
    cycles has them collected while the run goes on, not only when it ends."""
    jobs = [sim_job(f"j{i}", float(i * 10), ("T4", 1, 1.0)) for i in range(1500)]  # 3,000 instants
    maker = _CycleMaker()
    simulate(jobs, build_cluster([NodeGroup("T4", 1, 1)]), maker)
    assert not any(enabled for _, enabled in maker.seen)
    assert maker.seen[-1][0] > 0, "no cycle collected during the run"
    assert gc.isenabled()


def test_the_engines_collection_gap_doubles_while_nothing_is_found_and_halves_when_cycles_are(
        monkeypatch):
    from frenzy_scheduler.simulator import engine

    found = iter([0, 0, 0, 7, 7, 0])
    monkeypatch.setattr(engine.gc, "collect", lambda: next(found))
    collector = engine._RunCollector()
    collector.active = True
    first = engine.FIRST_COLLECTION_AFTER_INSTANTS
    collected_at = []
    for instant in range(1, 40 * first):
        before = collector.next_at
        collector.tick(instant)
        if collector.next_at != before:
            collected_at.append(instant)
        if len(collected_at) == 6:
            break
    gaps = [b - a for a, b in zip(collected_at, collected_at[1:])]
    assert collected_at[0] == first
    assert gaps == [2 * first, 4 * first, 8 * first, 4 * first, 2 * first]


class _Answering:
    """A policy that places the first queued job on one node, with the option it is given
    (from the job's menu by a function of that menu)."""

    name, round_s = "answering", 0.0

    def __init__(self, pick) -> None:
        self.pick = pick

    def schedule(self, queue, cluster, now_s, running=()):
        from frenzy_scheduler.core import Placement
        if not queue:
            return []
        job = queue[0]
        option = self.pick(job.options)
        node = next(n for n in cluster.nodes.values() if n.gpu_type == option.gpu_type)
        return [Placement(job.job_id, option, ((node.node_id, tuple(node.free_gpus[:1])),))]


def test_the_engine_runs_an_option_of_the_jobs_menu_and_refuses_any_other() -> None:
    """The menu check (`_execute`): the menu's own object, an equal copy, or one with a menu
    option's plan (a requeued job's scaled durations) runs; a plan the job was never offered
    is the policy's error, named."""
    import pytest
    from dataclasses import replace

    jobs = [sim_job("j0", 0.0, ("A100-80GB", 1, 100.0), ("T4", 1, 400.0))]
    for pick in (lambda menu: menu[0], lambda menu: replace(menu[0]),
                 lambda menu: replace(menu[0], duration_s=50.0)):
        result = simulate(jobs, build_cluster(GROUPS), _Answering(pick))
        assert [r.gpu_type for r in result.records] == ["A100-80GB"]
    foreign = lambda menu: replace(menu[0], plan=ParallelPlan(dp=1, tp=1, micro_batch=2))  # noqa: E731
    with pytest.raises(ValueError, match="j0.*an option it does not have"):
        simulate(jobs, build_cluster(GROUPS), _Answering(foreign))


def test_slowest_mean_is_the_mean_of_the_largest_percent_at_least_one() -> None:
    """The tail figure beside p99: 500 values give their 5 largest; fewer than 100, the
    largest alone; none, 0."""
    values = [float(v) for v in range(500)]
    random.Random(0).shuffle(values)
    assert slowest_mean(values) == (495 + 496 + 497 + 498 + 499) / 5
    assert slowest_mean([3.0, 9.0, 1.0]) == 9.0
    assert slowest_mean([]) == 0.0


def test_policies_see_a_running_job_in_its_measured_seconds_and_a_reshape_runs_it_once_scaled(
        ) -> None:
    """Live, a running job's menu is put in its measured seconds (`LiveState`: measured over
    predicted time of its option, applied to every option); the simulator shows every policy
    the same, each option times the job's error factor (its true time here), the running option
    too. A resize picked from that menu runs MARP's option at the same place at its true time,
    the error applied once: 'lone' (MARP: 10,000 s on 1 GPU, 5,000 s on 2) runs 1,000 s on 1
    GPU, then resizes to 2 with a 50 s restore and ends 1,050 + (5,000 f - 500) s in."""
    from dataclasses import replace

    from frenzy_scheduler.core import RESIZE, Placement

    config = SimConfig(launch_overhead_s=0.0, restart_overhead_s=50.0, duration_error_sigma=0.3,
                       seed=3)
    factor = config.error_factor("lone")
    assert abs(factor - 1.0) > 0.05  # a seed whose error shows
    seen: list[tuple[list[float], float]] = []

    class Resizing:
        name, round_s, elastic = "resizing", 0.0, True

        def schedule(self, queue, cluster, now_s, running=()):
            node = next(iter(cluster.nodes.values()))
            out = []
            for run in running:
                seen.append(([o.duration_s for o in run.options], run.option.duration_s))
                assert run.options == tuple(replace(o, duration_s=o.duration_s * factor)
                                            for o in jobs[0].options)  # every other field kept
                if run.option.num_gpus == 1:
                    out.append(Placement(run.job_id, run.options[1], ((node.node_id, (0, 1)),),
                                         RESIZE))
            for job in queue:
                gpu = 0 if job.job_id == "lone" else 2
                out.append(Placement(job.job_id, job.options[0], ((node.node_id, (gpu,)),)))
            return out

    jobs = [scaling_job("lone", 0.0, 10_000.0, counts=(1, 2)),
            sim_job("tick", 1000.0, ("A100-80GB", 1, 10.0))]
    result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), Resizing(),
                      config=config)
    menu, current = seen[0]
    assert menu == [10_000.0 * factor, 5_000.0 * factor] and current == 10_000.0 * factor
    lone = next(r for r in result.records if r.job_id == "lone")
    assert lone.restarts == 1 and lone.num_gpus == 2
    assert math.isclose(lone.end_time_s, 1050.0 + 5_000.0 * factor - 500.0)
    assert math.isclose(lone.work_done, 1.0)


def test_the_live_guard_keeps_elastic_sia_from_moving_a_job_again_within_it() -> None:
    # As above, 'lone' grows to 8 GPUs at 600 s. 'late' (4 GPUs) arrives at 700 s: unguarded,
    # Sia's next round shrinks 'lone' for it; under a 600 s guard (the orchestrator's, live)
    # 'lone' is shown without its menu until 1200 s, so 'late' waits for that round.
    def run(guard_s: float) -> dict:
        jobs = [scaling_job("lone", 0.0, 32_000.0), sim_job("small", 0.0, ("A100-80GB", 4, 600.0)),
                sim_job("late", 700.0, ("A100-80GB", 4, 600.0))]
        result = simulate(jobs, build_cluster([NodeGroup("A100-80GB", 8, 1)]), get_policy("sia"),
                          config=SimConfig(reshape_guard_s=guard_s))
        return {r.job_id: r for r in result.records}

    free, guarded = run(0.0), run(600.0)
    assert free["late"].first_start_s == 720.0
    assert guarded["late"].first_start_s == 1200.0
    # shrunk for 'late' at 1200 s, grown back when it ends at 1800 s: a guard apart
    assert guarded["lone"].restarts == 3 and guarded["lone"].start_time_s == 1800.0


class _Rogue:
    """Resizes every running job it is shown, menu or not: the engine must refuse a guarded one."""

    name = "rogue"
    elastic = True

    def schedule(self, queue, cluster, now_s, running=()):
        placed = get_policy("fifo").schedule(queue, cluster, now_s, running)
        return placed + [Placement(r.job_id, r.option, r.assignments, RESIZE) for r in running]


def test_the_engine_refuses_a_reshape_of_a_job_its_guard_hides() -> None:
    jobs = [sim_job("a", 0.0, ("A100-80GB", 4, 1000.0)), sim_job("b", 10.0, ("A100-80GB", 1, 10.0)),
            sim_job("c", 30.0, ("A100-80GB", 1, 10.0))]
    cluster = build_cluster([NodeGroup("A100-80GB", 8, 1)])
    simulate(jobs, cluster, _Rogue())  # unguarded, its resizes in place are carried out
    with pytest.raises(ValueError, match="guard hides"):
        simulate(jobs, cluster, _Rogue(), config=SimConfig(reshape_guard_s=600.0))
