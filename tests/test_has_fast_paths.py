"""HAS's fast paths never change a decision: the indexed, incremental path (`shortcuts=True`,
the default) against the straightforward one that scores every job and rebuilds every index."""
from __future__ import annotations

import bisect
from dataclasses import replace
from unittest import mock

import pytest

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.clusterfile import NodeGroup, build_cluster
from frenzy_scheduler.core import ClusterView, NodeState, QueuedJob, RunningJob
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.policies.elastic import (KeptRestarts, Menu, Menus, fill_floor, floor_items,
                                               full_duration_s, least_restart_s, most_freed,
                                               narrower_steps, other_types, shrink_loss_floor,
                                               shrink_plan, spare_gpus, victim_candidates,
                                               victims_by_type)
from frenzy_scheduler.policies.has import HasConfig, HasPolicy, _Pass, _ReleaseProfile
from frenzy_scheduler.policies.releases import ReleaseTimes, release_lists
from frenzy_scheduler import queuediff
from frenzy_scheduler.queuediff import IdentityDiff
from frenzy_scheduler.simulator import SimConfig, prepare_jobs, simulate

TYPES = {"T4": 8.0, "V100-32GB": 3.0, "A100-80GB": 1.0}  # type -> relative step time
TRACE = "tests/data/trace_philly_150.csv"
GROUPS = [NodeGroup("A100-80GB", 8, 1), NodeGroup("T4", 2, 2), NodeGroup("V100-32GB", 4, 2)]


def option(gpu_type: str, gpus: int, duration_s: float, tp: int = 1) -> PlanOption:
    return PlanOption(gpu_type, ParallelPlan(dp=gpus // tp, tp=tp), 1, 1.0, duration_s)


@st.composite
def busy_clusters(draw: st.DrawFn) -> tuple[list[QueuedJob], ClusterView, list[RunningJob]]:
    """Small, busy clusters and long queues: holds, reservations and closed types are common."""
    nodes, running = {}, []
    for i in range(draw(st.integers(1, 5))):
        gpu_type = draw(st.sampled_from(sorted(TYPES)))
        total = draw(st.sampled_from([2, 4, 8]))
        busy = draw(st.integers(0, total))
        nodes[f"n{i}"] = NodeState(f"n{i}", gpu_type, total, list(range(busy, total)))
        if busy:
            running.append(RunningJob(f"r{i}", option(gpu_type, busy, 1.0),
                                      ((f"n{i}", tuple(range(busy))),), 0.0,
                                      draw(st.floats(10.0, 5e4))))
    queue = []
    for j in range(draw(st.integers(1, 20))):
        base = draw(st.floats(10.0, 1e5))
        opts = []
        for gpu_type in sorted(draw(st.sets(st.sampled_from(sorted(TYPES)), min_size=1))):
            for count in sorted(draw(st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1))):
                tp = draw(st.sampled_from([1, 2])) if count > 1 else 1
                opts.append(option(gpu_type, count, base * TYPES[gpu_type] * 4 / (count + 3), tp))
        deadline = draw(st.sampled_from([0.0, 0.0, 0.0, draw(st.floats(100.0, 2e5))]))
        queue.append(QueuedJob(f"j{j}", draw(st.floats(-3e4, 100.0)), tuple(opts), deadline))
    return queue, ClusterView(nodes), running


CONFIGS = [HasConfig(), HasConfig(reserve_after_s=50.0), HasConfig(binding_holds=False),
           HasConfig(elastic=False, gpu_cost_weight=0.0)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters(), busy_clusters(), st.sampled_from(CONFIGS))
def test_fast_path_decides_like_the_straightforward_one(first, second, config) -> None:
    """Same answers, decision after decision (a warm fast policy meets a changed queue, the
    same jobs on another cluster, and a repeated call), placements and records alike."""
    fast, plain = HasPolicy(config), HasPolicy(config, shortcuts=False)
    renamed = [replace(j, job_id=f"k{i}") for i, j in enumerate(first[0])]
    for (queue, cluster, running), now_s in (
            (first, 200.0), (second, 300.0), ((first[0], second[1], second[2]), 400.0),
            (second, 400.0), (second, 500.0),  # the same queue again
            ((second[0][::2], *second[1:]), 600.0),  # jobs left
            ((second[0][::2] + renamed, *second[1:]), 700.0),  # ... and others came
            ((renamed[1:] + second[0][1:2], *first[1:]), 800.0),  # a job came back
            ((second[0] + second[0][:1], *second[1:]), 900.0)):  # a job twice
        assert fast.schedule(queue, cluster, now_s, running) == \
            plain.schedule(queue, cluster, now_s, running)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters(), st.sampled_from(CONFIGS), st.booleans())
def test_every_scan_reads_each_type_as_the_pass_records_it(inputs, config, shortcuts) -> None:
    """The scan reads a type's free GPUs, reservation and release list off its `_TypeState`
    (found by the number its rows carry), copies of the pass's index, reservations and release
    profile: at every scan, on every path that claims, reserves, binds or migrates, the copies
    equal those (a writer that forgot to say `changed` would leave a stale one, and both paths
    would read it alike)."""
    queue, cluster, running = inputs
    original = HasPolicy._scan
    scans: list[int] = []

    def checking(rows, facts, state):
        for gpu_type, view in state.types.items():
            assert (view.free, view.reservation) == (state.index.free_by_type[gpu_type],
                                                     state.reservations.get(gpu_type)), gpu_type
            assert view.per_gpu is None or view.per_gpu == state.releases.per_gpu(gpu_type)
        for row in rows:  # the rows name their type's state by number
            assert state.views[row.type_id] is state.types[row.gpu_type]
        scans.append(1)
        return original(rows, facts, state)

    with mock.patch.object(HasPolicy, "_scan", staticmethod(checking)):
        policy = HasPolicy(config, shortcuts=shortcuts)
        for now_s in (200.0, 5e3, 5e4):
            policy.schedule(queue, cluster, now_s, running)
    assume(scans)  # a queue whose every option is wider than the cluster is never scanned


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.sampled_from([1, 2, 4]),
                                   st.floats(2e3, 2e5), st.floats(0.0, 2e3),
                                   st.sets(st.sampled_from(sorted(TYPES)), min_size=1)),
                         max_size=8), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_the_running_jobs_in_line_kept_by_deltas_match_a_look_at_every_one(decisions, rng) -> None:
    """The running jobs that keep a place in line (`HasPolicy._in_line`), with the set that
    may move up kept by deltas, equal a look at every running job, decision after decision:
    jobs start, end, survive, are moved (a new object for the same job), lose their chance
    to gain as their work runs down, and a job object comes twice."""
    cluster = ClusterView({f"{t}-{i}": NodeState(f"{t}-{i}", t, 8, list(range(8)))
                           for t in TYPES for i in range(2)})
    kept, plain = HasPolicy(), HasPolicy(shortcuts=False)
    pool: list[RunningJob] = []
    for number, jobs in enumerate(decisions):
        now_s = 1_000.0 * number
        fresh = []
        for i, (gpu_type, gpus, work_s, started_s, menu) in enumerate(jobs):
            options = tuple(option(t, n, work_s * TYPES[t] / n) for t in sorted(menu | {gpu_type})
                            for n in (1, 2, 4))
            own = option(gpu_type, gpus, work_s * TYPES[gpu_type] / gpus)
            start_s = now_s - started_s
            fresh.append(RunningJob(f"d{number}-{i}", own, (), start_s,
                                    start_s + own.duration_s, options))
        survivors = rng.sample(pool, k=rng.randrange(len(pool) + 1))
        moved = [replace(run, start_time_s=now_s, restarts=1) for run in survivors[:1]]
        running = survivors[1:] + moved + fresh
        rng.shuffle(running)
        if running and rng.random() < 0.15:
            running.append(running[0])
        index = FreeIndex(cluster)
        lines = [policy._in_line(running, index, now_s, set()) for policy in (kept, plain)]
        assert [None if line is None else [(key, place.run, place.timings, place.left)
                                           for key, place in line.places] for line in lines] \
            == [None if lines[1] is None else [(key, place.run, place.timings, place.left)
                                               for key, place in lines[1].places]] * 2
        pool = list(dict.fromkeys(running))


def test_a_job_blocked_on_closed_types_is_not_scored(monkeypatch) -> None:
    """Worked by hand: an 8-GPU job holds for node a (4 free, 4 released at t=1000) rather
    than run for days on the free T4s, which reserves the A100s and closes them (claims cover
    every release); a short 2-GPU job backfills before the reservation; a long one may not
    (it would run past it), so it is skipped unscored. Same answer either way."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 8, [4, 5, 6, 7]),
                           "b": NodeState("b", "T4", 2, [0, 1])})
    running = [RunningJob("r", option("A100-80GB", 4, 1.0), (("a", (0, 1, 2, 3)),), 0.0, 1000.0)]
    queue = [QueuedJob("big", 0.0, (option("A100-80GB", 8, 100.0), option("T4", 2, 1e6))),
             QueuedJob("long", 0.0, (option("A100-80GB", 2, 50_000.0),)),
             QueuedJob("short", 0.0, (option("A100-80GB", 2, 500.0),))]
    scored: list[str] = []
    original = HasPolicy._score

    def counting(facts, state):
        scored.append(facts.job.job_id)
        return original(facts, state)

    monkeypatch.setattr(HasPolicy, "_score", staticmethod(counting))
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert scored == ["big", "short"]
    scored.clear()
    assert HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running) == fast
    assert scored == ["big", "short", "long"]
    assert [(p.job_id, p.assignments) for p in fast] == [("short", (("a", (4, 5)),))]


def test_once_every_type_is_closed_a_job_that_cannot_start_is_not_looked_at(monkeypatch) -> None:
    """Worked by hand, one type: "big" (8 A100s, 4 free, 4 released at t=1000) has waited
    past `reserve_after_s`, so it reserves the A100s (shadow t=1000, no spare GPUs), and its
    claim (8 - 4 free) covers the 4 released, which closes them: every type is closed. The
    walk then reaches "short" (500 s): it ends by the shadow, so it starts. "long" (2 GPUs,
    50,000 s) fits by count but
    would run past the shadow, so it cannot start and is passed over before any other test
    (`_Pass.may_start_now`): neither filtered nor asked `blocked_on_closed`. Same answer as
    the walk that scores every job."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 8, [4, 5, 6, 7])})
    running = [RunningJob("r", option("A100-80GB", 4, 1.0), (("a", (0, 1, 2, 3)),), 0.0, 1000.0)]
    queue = [QueuedJob("big", -30_000.0, (option("A100-80GB", 8, 100.0),)),
             QueuedJob("long", 0.0, (option("A100-80GB", 2, 50_000.0),)),
             QueuedJob("short", 0.0, (option("A100-80GB", 2, 500.0),))]
    looked_at: list[str] = []
    filter_, blocked = HasPolicy._filter, _Pass.blocked_on_closed

    def filtering(facts, state):
        looked_at.append(facts.job.job_id)
        return filter_(facts, state)

    def asking(state, facts):
        looked_at.append(facts.job.job_id)
        return blocked(state, facts)

    monkeypatch.setattr(HasPolicy, "_filter", staticmethod(filtering))
    monkeypatch.setattr(_Pass, "blocked_on_closed", asking)
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert "long" not in looked_at and "short" in looked_at
    assert HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running) == fast
    assert [(p.job_id, p.assignments) for p in fast] == [("short", (("a", (4, 5)),))]


def test_a_job_that_waits_forever_everywhere_is_held_at_its_first_hold(monkeypatch) -> None:
    """Worked by hand (no binding holds; a hold reserves only after 50 s blocked). In order:
    "t4" holds for the two busy T4s (released at t=5000) rather than run 1e5 s on A100s,
    which claims them. "big" fits nowhere and has waited 100 s, so it reserves node a's 8
    A100s (4 free, 4 released at t=1000) with no spare GPUs. "short" backfills before the
    reservation on 2 of the 4 free. "stuck" fits by count on the 2 left, but the reservation
    refuses it (it would run past t=1000), and both its types wait forever: A100 needs 2 +
    8 claimed - 2 free = 8 more GPUs of the 4 ever released, T4 2 + 2 of 2. So its scan
    stops at its first hold, which waits forever, and holds for its fastest option; the
    other scans never ask (their first holds wait a finite time, or they start). Same answer
    either way."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 8, [4, 5, 6, 7]),
                           "b": NodeState("b", "T4", 2, [])})
    running = [RunningJob("r", option("A100-80GB", 4, 1.0), (("a", (0, 1, 2, 3)),), 0.0, 1000.0),
               RunningJob("r2", option("T4", 2, 1.0), (("b", (0, 1)),), 0.0, 5000.0)]
    queue = [QueuedJob("big", -100.0, (option("A100-80GB", 8, 100.0), option("T4", 2, 1e6))),
             QueuedJob("t4", 0.0, (option("T4", 2, 10.0), option("A100-80GB", 2, 1e5))),
             QueuedJob("stuck", 0.0, (option("A100-80GB", 2, 50_000.0),
                                      option("T4", 2, 60_000.0))),
             QueuedJob("short", 0.0, (option("A100-80GB", 2, 500.0),))]
    asked: dict[str, bool] = {}
    held: dict[str, str] = {}
    original_ask, original_score = _Pass.waits_forever, HasPolicy._score

    def asking(state, facts):
        asked[facts.job.job_id] = answer = original_ask(state, facts)
        return answer

    def recording(facts, state):
        row, assignments = choice = original_score(facts, state)
        if row is not None and assignments is None:
            held[facts.job.job_id] = row.gpu_type
        return choice

    monkeypatch.setattr(_Pass, "waits_forever", asking)
    monkeypatch.setattr(HasPolicy, "_score", staticmethod(recording))
    config = HasConfig(launch_overhead_s=0.0, elastic=False, binding_holds=False,
                       reserve_after_s=50.0)
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert asked == {"stuck": True}
    assert held == {"t4": "T4", "stuck": "A100-80GB"}
    asked.clear()
    held.clear()
    assert HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running) == fast
    assert asked == {}
    assert held == {"t4": "T4", "stuck": "A100-80GB"}
    assert [(p.job_id, p.assignments) for p in fast] == [("short", (("a", (4, 5)),))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters(), st.sampled_from(CONFIGS + [HasConfig(binding_holds=False,
                                                             reserve_after_s=50.0)]))
def test_every_score_answers_as_the_scan_of_every_option_would(busy, config) -> None:
    """Each answer of the fast `_score` (a job held unscanned when it waits forever, the
    undominated options scanned alone) against the scan of every option on the same pass
    state, at every job the walk scores, over two decisions."""
    queue, cluster, running = busy
    original = HasPolicy._score

    def option_of(choice):  # the plain scan's rows are copies: compared by their options
        row, assignments = choice
        return None if row is None else (row.option, assignments)

    def checking(facts, state):
        fast = original(facts, state)
        state.prune_holds = False
        plain = original(facts, state)
        state.prune_holds = True
        assert option_of(fast) == option_of(plain)
        return fast

    with mock.patch.object(HasPolicy, "_score", staticmethod(checking)):
        policy = HasPolicy(config)
        for now_s in (200.0, 300.0):
            policy.schedule(queue, cluster, now_s, running)


def test_simulation_is_the_same_with_and_without_the_fast_paths() -> None:
    """A Philly window with the realism defaults (holds, reservations, elastic moves,
    restarts): every job starts, moves and ends at the same times on the same GPUs."""
    jobs = prepare_jobs(TRACE, GROUPS, count=150, load=2.0, seed=0)
    results = [simulate(jobs, build_cluster(GROUPS), HasPolicy(shortcuts=shortcuts),
                        config=SimConfig.realistic())
               for shortcuts in (True, False)]
    fast, plain = ([(r.job_id, r.first_start_s, r.start_time_s, r.end_time_s, r.gpu_type,
                     r.num_gpus, r.restarts) for r in result.records] for result in results)
    assert fast == plain
    assert results[0].reshapes == results[1].reshapes
    assert sum(r.restarts for r in results[0].records) > 0  # the elastic moves were exercised


@pytest.mark.parametrize("compiled_loop", [False, True])
@settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.lists(st.lists(st.integers(0, 15), max_size=12, unique=True), min_size=1, max_size=6),
    # long reorderings: more items out of place than the diff aligns one by one
    st.lists(st.lists(st.integers(0, 99), max_size=90, unique=True), min_size=1, max_size=4)))
def test_identity_diff_reports_what_arrived_and_left(compiled_loop, sequences) -> None:
    """Against plain set arithmetic, over sequences that share, drop and reorder objects.
    (An object twice answers None when both copies arrived; has also checks job ids, and the
    test above covers a job queued twice.) Both ways of finding a shared run: the compiled
    build's loop and the builtins the source runs (`queuediff._COMPILED`)."""
    with mock.patch.object(queuediff, "_COMPILED", compiled_loop):
        _identity_diff_against_sets(sequences)


def _identity_diff_against_sets(sequences) -> None:
    pool = [object() for _ in range(100)]
    diff: IdentityDiff[object] = IdentityDiff()
    before: list[object] = []
    for picks in sequences:
        items = [pool[i] for i in picks]
        arrived, departed = diff.update(items)
        assert sorted(map(id, arrived)) == sorted(set(map(id, items)) - set(map(id, before)))
        assert sorted(map(id, departed)) == sorted(set(map(id, before)) - set(map(id, items)))
        before = items
    diff.reset()
    assert diff.update(before + before[:1]) is None or not before


@pytest.mark.parametrize("compiled_loop", [False, True])
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 10_000)), st.integers(0, 5),
                          st.lists(st.integers(0, 10_000), max_size=3)), max_size=8),
       st.integers(0, 60))
def test_identity_diff_follows_a_queue_where_jobs_leave_anywhere_and_arrive_last(
        compiled_loop, steps, start) -> None:
    """The queue's own pattern, the one the alignment is for: jobs leave from anywhere
    (more of them than it aligns one by one, at times) and newcomers go at the end; in a
    list of running jobs, some are also replaced in place. What arrived comes in its order.
    Both ways of finding a shared run, as above."""
    with mock.patch.object(queuediff, "_COMPILED", compiled_loop):
        _identity_diff_follows_a_queue(steps, start)


def _identity_diff_follows_a_queue(steps, start) -> None:
    queue = [object() for _ in range(start)]
    kept = set(map(id, queue))
    diff: IdentityDiff[object] = IdentityDiff()
    assert diff.update(queue) == (queue, [])
    for leaving, arriving, replaced in steps:
        gone = {picked % len(queue) for picked in leaving} if queue else set()
        # a running job reshaped: a new object in its place (the simulator's dict of them)
        swapped = {picked % len(queue) for picked in replaced} - gone if queue else set()
        left = [job for i, job in enumerate(queue) if i in gone | swapped]
        queue = [object() if i in swapped else job for i, job in enumerate(queue)
                 if i not in gone]
        came = [job for job in queue if id(job) not in kept]
        newcomers = [object() for _ in range(arriving)]
        queue += newcomers
        arrived, departed = diff.update(queue)
        assert arrived == came + newcomers
        assert sorted(map(id, departed)) == sorted(map(id, left))
        kept = set(map(id, queue))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.integers(1, 8),
                                   st.sampled_from([10.0, 20.0, 35.5, 1e4])),
                         max_size=10), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_release_times_kept_by_deltas_match_a_rebuild(sets, rng) -> None:
    """The release lists kept across calls (jobs start, end, restart as new objects, equal
    (end, GPUs) pairs on one type, a job object passed twice) equal a rebuild from scratch,
    and so do the per-GPU lists of the types asked for (kept by the same deltas once asked):
    each running job's end once for each of its GPUs, ascending."""
    kept = ReleaseTimes()
    pool: list[RunningJob] = []
    for jobs in sets:
        fresh = [RunningJob(f"r{i}", option(t, n, 1.0), (), 0.0, end)
                 for i, (t, n, end) in enumerate(jobs)]
        running = rng.sample(pool, k=min(len(pool), 3)) + fresh  # some survive, in any order
        if running and rng.random() < 0.2:
            running.append(running[0])
        ends, cumulative = kept.of(running)
        assert (ends, cumulative) == release_lists(running)
        for gpu_type in rng.sample(sorted(TYPES), k=rng.randrange(len(TYPES) + 1)):
            by_hand = sorted(r.expected_end_s for r in running if r.option.gpu_type == gpu_type
                             for _ in range(r.num_gpus))
            assert kept.per_gpu(gpu_type, ends, cumulative) == by_hand
        pool = running


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.integers(1, 8),
                                             st.sampled_from([10.0, 20.0, 35.5, 1e4])),
                                   max_size=10),
                          st.sampled_from([0.0, 15.0, 20.0, 5e3]),
                          st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.integers(1, 40)),
                                   max_size=12)), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_release_waits_kept_across_decisions_match_fresh_ones(decisions, rng) -> None:
    """The release profile's answers, memoised across decisions per type while its release
    list is unchanged (`ReleaseTimes.per_gpu`), equal a fresh profile's and a count by hand,
    as jobs start, end and survive between decisions at various times."""
    kept = ReleaseTimes()
    pool: list[RunningJob] = []
    for jobs, now_s, asked in decisions:
        fresh = [RunningJob(f"r{i}", option(t, n, 1.0), ((f"n{i}", tuple(range(n))),), 0.0, end)
                 for i, (t, n, end) in enumerate(jobs)]
        running = rng.sample(pool, k=min(len(pool), 3)) + fresh
        warm, cold = _ReleaseProfile(running, now_s, kept), _ReleaseProfile(running, now_s)
        for gpu_type, short in asked + asked[::-1]:
            ends = sorted((r.expected_end_s, r.num_gpus) for r in running
                          if r.option.gpu_type == gpu_type)
            by_hand = next((max(0.0, end - now_s) for k, (end, _) in enumerate(ends)
                            if sum(n for _, n in ends[:k + 1]) >= short), float("inf"))
            assert warm.wait_s(gpu_type, short) == cold.wait_s(gpu_type, short) == by_hand
        pool = running


# What a running job measured its restart at (0: not measured, the policy's own is charged),
# and whether a move throws away the work since its last checkpoint (it does not save on
# request; checkpoints every 600 s of its run): admission charges each victim its own touch
RESTARTS = st.tuples(st.sampled_from([0.0, 0.0, 15.0, 400.0]), st.booleans())


def measured(run: RunningJob, restart: tuple[float, bool]) -> RunningJob:
    restart_s, saves = restart
    return replace(run, restart_s=restart_s, saves_on_request=saves,
                   checkpoint_interval_s=0.0 if saves else 600.0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.sampled_from([1, 2, 4, 8]),
                          st.floats(0.05, 1.0), st.sets(st.sampled_from(sorted(TYPES)),
                                                         min_size=1), RESTARTS),
                min_size=1, max_size=8),
       st.dictionaries(st.sampled_from(sorted(TYPES)), st.integers(0, 8)),
       st.floats(10.0, 1e5), st.floats(0.0, 5e3), st.booleans())
def test_admission_bounds_hold_with_displacement(jobs, free, horizon_s, now_s,
                                                 return_counted) -> None:
    """What admission prunes by (`spare_gpus`: `deficit > spare` is skipped; `most_freed`: a
    plan touching k jobs costs at least 2 of the least restart each, `least_restart_s`) holds
    for every plan `shrink_plan` finds, displacements (charged to their end, or over the
    horizon when their return is counted) and victims' own measured restarts included (a
    displaced job frees its whole allocation); and its memo of displacements does not
    change the plan."""
    runs = []
    for i, (gpu_type, gpus, left, menu_types, restart) in enumerate(jobs):
        menu = tuple(option(t, n, 1e4 * TYPES[t] * 4 / (n + 3))
                     for t in sorted(menu_types | {gpu_type}) for n in (1, 2, 4, 8))
        own = option(gpu_type, gpus, 1e4 * TYPES[gpu_type] * 4 / (gpus + 3))
        runs.append(measured(RunningJob(f"r{i}", own, ((f"n{i}", tuple(range(gpus))),), 0.0,
                                        1e5, options=menu, fraction_at_start=left), restart))
    restart_s = 120.0
    least_s = least_restart_s(runs, restart_s)
    assert least_s == min([restart_s] + [r.restart_s for r in runs if r.restart_s])
    victims = victims_by_type(runs, now_s, Menus(), restart_s, displace=True)
    candidates = victim_candidates(runs, now_s, Menus(), displace=True)
    spare, most = spare_gpus(candidates), most_freed(candidates)
    for gpu_type in victims:
        for deficit in range(1, spare[gpu_type] + 3):
            plan = shrink_plan(victims, gpu_type, deficit, horizon_s, set(), free, None,
                               return_counted)
            assert plan == shrink_plan(victims, gpu_type, deficit, horizon_s, set(), free, {},
                                       return_counted)
            if plan is None:
                continue
            assert deficit <= spare[gpu_type]
            touched = bisect.bisect_left(most[gpu_type], deficit) + 1
            assert len(plan[1]) >= touched
            assert plan[0] >= 2 * least_s * touched * (1.0 - 1e-9)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.sampled_from([1, 2, 4, 8]),
                          st.floats(0.05, 1.0), st.sets(st.sampled_from(sorted(TYPES)),
                                                         min_size=1),
                          st.floats(0.3, 3.0), RESTARTS), min_size=1, max_size=8),
       st.one_of(st.none(), st.dictionaries(st.sampled_from(sorted(TYPES)), st.integers(0, 8))),
       st.floats(10.0, 1e5), st.sets(st.sampled_from([f"r{i}" for i in range(8)]), max_size=2),
       st.floats(0.0, 1.0), st.floats(0.0, 5e3), st.booleans())
# A displacement whose return is counted (its loss over a 10 s horizon, not to its end) is
# the cheapest way to free the GPU: a floor that charged it to its end would be above it
@example(jobs=[("A100-80GB", 1, 1.0, {"A100-80GB"}, 1.0, (0.0, False)),
               ("A100-80GB", 1, 1.0, {"A100-80GB"}, 1.0, (0.0, False)),
               ("A100-80GB", 1, 1.0, {"A100-80GB", "T4"}, 1.0, (0.0, False))],
         free={"T4": 1}, horizon_s=10.0, skip=set(), shorter=0.0, now_s=0.0,
         return_counted=True)
def test_shrink_loss_floor_is_below_every_plan(jobs, free, horizon_s, skip, shorter,
                                               now_s, return_counted) -> None:
    """Admission builds a plan only when `shrink_loss_floor` leaves it a gain: the floor is at
    most the loss of the plan `shrink_plan` finds (displacements, skipped jobs and menus whose
    narrower steps are not monotone included), inf only when it finds none, and so is the
    floor filled from the per-GPU costs of a shorter horizon (what admission reuses across
    a job's options of one type); and filling the shared displacement memo first changes
    no plan. Victims carry their own measured restarts and lost work (`touch_cost_s`)."""
    runs = []
    for i, (gpu_type, gpus, left, menu_types, skew, restart) in enumerate(jobs):
        menu = tuple(option(t, n, 1e4 * TYPES[t] * 4 / (n + 3) * (skew if n == 2 else 1.0))
                     for t in sorted(menu_types | {gpu_type}) for n in (1, 2, 4, 8))
        own = option(gpu_type, gpus, 1e4 * TYPES[gpu_type] * 4 / (gpus + 3))
        runs.append(measured(RunningJob(f"r{i}", own, ((f"n{i}", tuple(range(gpus))),), 0.0,
                                        1e5, options=menu, fraction_at_start=left), restart))
    restart_s = 120.0
    victims = victims_by_type(runs, now_s, Menus(), restart_s, displace=free is not None)
    spare = spare_gpus(victim_candidates(runs, now_s, Menus(), displace=free is not None))
    for gpu_type in victims:
        for deficit in range(1, spare[gpu_type] + 3):
            memo: dict = {}
            floor_s = shrink_loss_floor(victims, gpu_type, deficit, horizon_s, skip, free, memo,
                                        return_counted)
            plan = shrink_plan(victims, gpu_type, deficit, horizon_s, skip, free, memo,
                               return_counted)
            assert plan == shrink_plan(victims, gpu_type, deficit, horizon_s, skip, free, None,
                                       return_counted)
            if floor_s == float("inf"):
                assert plan is None
            reused_s = fill_floor(floor_items(victims, gpu_type, horizon_s * shorter, skip, free,
                                              memo, return_counted), deficit)
            if plan is not None:
                assert floor_s * (1.0 - 1e-9) <= plan[0]
                assert reused_s * (1.0 - 1e-9) <= plan[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.sampled_from([1, 2, 4, 8]),
                          st.sets(st.sampled_from(sorted(TYPES))),
                          st.sampled_from([0.0, 0.0, 5e4]), st.sampled_from([0.0, 50.0])),
                max_size=8),
       st.lists(st.tuples(st.sampled_from([0.0, 60.0]), st.booleans()), min_size=1, max_size=4))
def test_victims_kept_by_job_match_fresh_ones(jobs, asks) -> None:
    """`victims_by_type` with what `Menus` keeps by job identity (asked at other times, with
    and without displacement) equals a derivation from scratch: deadline jobs, restoring
    jobs and jobs with no menu, or nothing narrower and nowhere to go, are left out."""
    runs = []
    for i, (gpu_type, gpus, menu_types, deadline_s, restoring_until_s) in enumerate(jobs):
        menu = tuple(option(t, n, 1e4 * TYPES[t] * 4 / (n + 3))
                     for t in sorted(menu_types) for n in (1, 2, 4, 8))
        own = option(gpu_type, gpus, 1e4 * TYPES[gpu_type] * 4 / (gpus + 3))
        runs.append(RunningJob(f"r{i}", own, ((f"n{i}", tuple(range(gpus))),), 0.0, 1e5,
                               options=menu, deadline_s=deadline_s,
                               restoring_until_s=restoring_until_s))
    menus = Menus()
    for now_s, displace in asks:
        scratch: dict = {}
        for run in runs:
            if run.options and not run.deadline_s and run.restoring_until_s <= now_s:
                steps = narrower_steps(run, Menu(run.options))
                others = other_types(run, Menu(run.options)) if displace else []
                if steps or others:
                    scratch.setdefault(run.option.gpu_type, []).append(
                        (run, full_duration_s(run), run.remaining_fraction(now_s), steps, others,
                         2 * 120.0))
        assert victims_by_type(runs, now_s, menus, 120.0, displace) == scratch


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(TYPES)), st.sampled_from([1, 2, 4, 8]),
                          st.sampled_from([0.0, 50.0, 100.0]), st.sampled_from([0, 1]),
                          st.sampled_from([0.0, 30.0, 80.0])), min_size=1, max_size=6),
       st.lists(st.tuples(st.sampled_from([0.0, 49.0, 50.0, 99.0, 100.0, 110.0, 140.0, 150.0]),
                          st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_admission_candidates_kept_across_decisions_match_fresh_ones(jobs, asks) -> None:
    """Admission's victim candidates (and spare, most freed) kept from the last decision equal
    fresh ones as time passes restore ends and moved jobs' reshape intervals, the running set
    changes, and displacement turns on and off; spending the spare of one decision does not
    leak into the next. Jobs on one GPU of a type can give nothing up there (a victim only
    with displacement), so some jobs' becoming movable changes nothing."""
    interval_s = 60.0
    runs = []
    for i, (gpu_type, gpus, restoring_until_s, restarts, start_s) in enumerate(jobs):
        menu = tuple(option(t, n, 1e4 * TYPES[t] * 4 / (n + 3)) for t in sorted(TYPES)
                     for n in (1, 2, 4, 8))
        own = option(gpu_type, gpus, 1e4 * TYPES[gpu_type] * 4 / (gpus + 3))
        runs.append(RunningJob(f"r{i}", own, ((f"n{i}", tuple(range(gpus))),), start_s, 1e5,
                               options=menu, restoring_until_s=max(start_s, restoring_until_s),
                               restarts=restarts))
    policy = HasPolicy(HasConfig(reshape_interval_s=interval_s))
    for now_s, displace, drop_one in sorted(asks):
        running = runs[1:] if drop_one else runs
        candidates, spare, most = policy._candidates(running, now_s, displace)
        fresh = victim_candidates(running, now_s, Menus(), displace, interval_s)
        assert (candidates, spare, most) == (fresh, spare_gpus(fresh), most_freed(fresh))
        for gpu_type in spare:
            spare[gpu_type] -= 1


# One step on the running jobs: a job starts (appended, as the simulator's and the live
# scheduler's running dicts put it), one ends, one is reshaped (a new object at the end, or in
# its place), or only time passes (forward, or back)
_RUN_STEPS = st.lists(st.tuples(st.sampled_from(["start", "end", "reshape", "in place", "wait"]),
                                st.integers(0, 20), st.sampled_from(sorted(TYPES)),
                                st.sampled_from([1, 2, 4, 8]), st.sampled_from([0, 1]),
                                st.sampled_from([0.0, 30.0]),
                                st.sampled_from([-20.0, 0.0, 10.0, 45.0, 70.0])),
                      min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(_RUN_STEPS, st.booleans())
# A job replaced in its place by one movable at once: kept in the place, not appended
@example(steps=[("start", 0, "T4", 4, 0, 0.0, 0.0)] * 3 + [("in place", 1, "T4", 4, 0, 0.0, 1.0)],
         displace=True)
def test_admission_candidates_kept_by_deltas_match_fresh_ones(steps, displace) -> None:
    """`KeptCandidates`, updated by the jobs that started and ended since the last decision,
    equals a derivation from scratch, the order of each type's candidates included (the
    order `shrink_plan` lists its moves in): jobs start at the end, end anywhere, are
    reshaped into a new object at the end or in their place, restores end and moved jobs'
    intervals pass as time goes on (and a clock that goes back is answered afresh)."""
    interval_s = 60.0
    menu = tuple(option(t, n, 1e4 * TYPES[t] * 4 / (n + 3)) for t in sorted(TYPES)
                 for n in (1, 2, 4, 8))
    serial = iter(range(10**6))

    def run(gpu_type: str, gpus: int, restarts: int, restore_s: float, now_s: float
            ) -> RunningJob:
        i = next(serial)
        own = option(gpu_type, gpus, 1e4 * TYPES[gpu_type] * 4 / (gpus + 3))
        return RunningJob(f"r{i}", own, ((f"n{i}", tuple(range(gpus))),), now_s, now_s + 1e5,
                          options=menu if i % 7 else (), restoring_until_s=now_s + restore_s,
                          restarts=restarts)

    policy = HasPolicy(HasConfig(reshape_interval_s=interval_s))
    running: list[RunningJob] = []
    now_s = 0.0
    for kind, which, gpu_type, gpus, restarts, restore_s, dt_s in steps:
        now_s = max(0.0, now_s + dt_s)
        if kind == "start" or not running:
            running.append(run(gpu_type, gpus, restarts, restore_s, now_s))
        elif kind == "end":
            del running[which % len(running)]
        elif kind == "reshape":
            del running[which % len(running)]
            running.append(run(gpu_type, gpus, 1, restore_s, now_s))
        elif kind == "in place":  # (a job movable at once too: the order must still hold)
            running[which % len(running)] = run(gpu_type, gpus, restarts, restore_s, now_s)
        candidates, spare, most = policy._candidates(list(running), now_s, displace)
        fresh = victim_candidates(running, now_s, Menus(), displace, interval_s)
        assert (candidates, spare, most) == (fresh, spare_gpus(fresh), most_freed(fresh))
        for gpu_type in spare:  # the caller spends its copy of the spare
            spare[gpu_type] -= 1


def test_a_victim_is_kept_as_one_once_its_rounded_interval_has_passed() -> None:
    """Worked by hand: a job moved at t = 424.4711385820975, with a 600 s interval before it
    may be moved again. In floats the sum of the two is 1024.4711385820974, where `movable`
    (now - start = 599.9999999999999) still says no. The kept candidates had taken that sum
    as the time the job turns movable; asked at it, they saw nothing left to change later
    and missed the job at 1025.47 (`test_early_stop_decides_like_the_whole_walk` found it:
    the fast policy admitted nobody where the straightforward one shrank this job)."""
    interval_s, moved_s = 600.0, 424.4711385820975
    assert moved_s + interval_s == 1024.4711385820974 and 1024.4711385820974 - moved_s < 600.0
    menu = tuple(option("A100-80GB", n, 1e4 / n) for n in (1, 2, 4))
    running = [RunningJob("j7", menu[2], (("n0", (0, 1, 2, 3)),), moved_s, moved_s + 1e5,
                          options=menu, restarts=1)]
    policy = HasPolicy(HasConfig(reshape_interval_s=interval_s))
    for now_s in (moved_s, 1024.4711385820974, 1025.4711385820974):
        fresh = victim_candidates(running, now_s, Menus(), True, interval_s)
        assert policy._candidates(running, now_s, True)[0] == fresh, now_s
    assert fresh  # movable at last


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["start", "end", "in place"]), st.integers(0, 20),
                          st.sampled_from([0.0, 0.0, 15.0, 40.0, 90.0, 300.0])),
                min_size=1, max_size=30),
       st.sampled_from([60.0, 180.0]))
def test_least_restart_kept_by_deltas_matches_a_pass_over_the_running_jobs(steps,
                                                                          restart_s) -> None:
    """`KeptRestarts` (admission's bound: the least restart any running job would be
    charged) equals `least_restart_s` over the running jobs as jobs that measured a restart,
    or none, start, end and are replaced in place, and the least of them leaves."""
    kept = KeptRestarts()
    running: list[RunningJob] = []
    for i, (kind, which, measured_s) in enumerate(steps):
        run = RunningJob(f"r{i}", option("T4", 1, 100.0), (("n", (0,)),), 0.0, 1e5,
                         restart_s=measured_s)
        if kind == "start" or not running:
            running.append(run)
        elif kind == "end":
            del running[which % len(running)]
        else:
            running[which % len(running)] = run
        assert kept.least_restart_s(list(running), restart_s) == \
            least_restart_s(running, restart_s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters(), st.floats(0.0, 3e5), st.sampled_from([None, 1, 2, 4, 8]))
def test_the_saving_per_gpu_read_off_the_frontier_is_the_scan_of_every_entry(
        busy, baseline_s, share_gpus) -> None:
    """`_saving_per_gpu` looks only at a type's frontier entries; its answer is the scan of
    every entry of the type (the most saved per GPU over `baseline_s`, the first of equals,
    within the share on the type the job wants), for every job, type and share."""
    from frenzy_scheduler.policies.has import _NO_LIMIT, _saving_per_gpu, _share_limit

    queue, cluster, _ = busy
    index = FreeIndex(cluster)
    policy = HasPolicy()
    for job in queue:
        facts = policy._derive_facts(job, index)
        if facts is None:
            continue
        share = None if share_gpus is None else {t: share_gpus for t in TYPES}
        for gpu_type in TYPES:
            limit = _share_limit(share, facts) if gpu_type == facts.wanted else _NO_LIMIT
            best = None
            for rank, entry in enumerate(facts.entries):
                if entry[1] == gpu_type and entry[2] <= limit:
                    per_gpu_s = (baseline_s - entry[3]) / entry[2]
                    if per_gpu_s > 0.0 and (best is None or per_gpu_s > best[0]):
                        best = (per_gpu_s, rank)
            saving = _saving_per_gpu(facts, baseline_s, share, gpu_type)  # (s, the entry's row)
            assert (saving if saving is None else (saving[0], saving[1].rank)) == best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([10.0, 50.0, 100.0, 5e3]),
                          st.sampled_from([0.0, 30.0, 60.0, 900.0, float("inf")])), max_size=16),
       st.sampled_from([5.0, 50.0, 100.0, 1e4]))
def test_the_bar_is_the_least_wait_of_the_jobs_ahead_no_longer(waiting, best_s) -> None:
    """`_bar_s` (a loop, compiled) is the least wait among the jobs ahead no longer than this
    one, inf when there is none: `min` over them, as first written."""
    from frenzy_scheduler.policies.has import _bar_s
    assert _bar_s(waiting, best_s) == min(
        [wait_s for job_s, wait_s in waiting if job_s <= best_s], default=float("inf"))


def _checked_jumps(monkeypatch) -> list[tuple[int, int]]:
    """Each tail jump of the walk (`_Pass.next_may_start`) as (where it landed, where the walk
    one job at a time would stop: the first job that `may_start_now` does not rule out, or
    before which a running job in line has its turn)."""
    original = _Pass.next_may_start
    jumps: list[tuple[int, int]] = []

    def checked(state, ordered, position, stop, line_key):
        got = original(state, ordered, position, stop, line_key)
        want = position
        while want < min(stop, len(ordered)) and \
                not (line_key is not None and line_key < ordered[want].key) and \
                not state.may_start_now(ordered[want]):
            want += 1
        jumps.append((got, want))
        return got

    monkeypatch.setattr(_Pass, "next_may_start", checked)
    return jumps


def test_the_tail_jump_passes_the_jobs_that_cannot_start(monkeypatch) -> None:
    """`test_once_every_type_is_closed_a_job_that_cannot_start_is_not_looked_at`'s example
    with three long jobs that aged ahead of "short" (waited 249,000 s: 49,800 s of aging
    credit on their 50,000 s, against "short"'s 500 s): once "big" closed the only type,
    none of them can start, and the walk jumps from the first one past the other two, to
    "short", in one step; "short" starts."""
    jumps = _checked_jumps(monkeypatch)
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 8, [4, 5, 6, 7])})
    running = [RunningJob("r", option("A100-80GB", 4, 1.0), (("a", (0, 1, 2, 3)),), 0.0, 1000.0)]
    queue = [QueuedJob("big", -30_000.0, (option("A100-80GB", 8, 100.0),))] + [
        QueuedJob(f"long{i}", -249_000.0, (option("A100-80GB", 2, 50_000.0),))
        for i in range(3)] + [QueuedJob("short", 0.0, (option("A100-80GB", 2, 500.0),))]
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    placed = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert [(p.job_id, p.assignments) for p in placed] == [("short", (("a", (4, 5)),))]
    assert jumps[0] == (4, 4)  # from long0 (position 1) to "short" (position 4)
    assert all(got == want for got, want in jumps)
