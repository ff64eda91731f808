"""HAS's walk stops where no later job can start now (`_Pass.idle_from`), and that never
changes an answer: the fast path against the straightforward one (`shortcuts=False`, which
walks the whole queue), decision by decision, through sequences of events."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.core import (MIGRATE, PLACE, PREEMPT, ClusterView, NodeState, Placement, QueuedJob,
                                   RunningJob)
from frenzy_scheduler.policies import has
from frenzy_scheduler.policies.has import HasConfig, HasPolicy

TYPES = {"T4": 8.0, "V100-32GB": 3.0, "A100-80GB": 1.0}  # type -> relative step time
CONFIGS = [HasConfig(), HasConfig(reserve_after_s=50.0), HasConfig(binding_holds=False),
           HasConfig(elastic=False), HasConfig(launch_overhead_s=0.0, gpu_cost_weight=0.0)]


def option(gpu_type: str, gpus: int, duration_s: float, tp: int = 1) -> PlanOption:
    return PlanOption(gpu_type, ParallelPlan(dp=gpus // tp, tp=tp), 1, 1.0, duration_s)


@st.composite
def queued_jobs(draw: st.DrawFn, name: str, now_s: float) -> QueuedJob:
    """A job with options on one to three types; durations over four decades, so the
    shortest-first order puts long jobs (that cannot backfill) at the tail."""
    base = draw(st.floats(10.0, 1e5))
    opts = []
    for gpu_type in sorted(draw(st.sets(st.sampled_from(sorted(TYPES)), min_size=1))):
        for count in sorted(draw(st.sets(st.sampled_from([1, 2, 4]), min_size=1))):
            tp = draw(st.sampled_from([1, 2])) if count > 1 else 1
            opts.append(option(gpu_type, count, base * TYPES[gpu_type] * 3 / (count + 2), tp))
    deadline = draw(st.sampled_from([0.0, 0.0, 0.0, now_s + draw(st.floats(100.0, 2e5))]))
    return QueuedJob(name, now_s - draw(st.floats(0.0, 3e4)), tuple(opts), deadline)


@st.composite
def scenarios(draw: st.DrawFn):
    """A small busy cluster (a few GPUs left free: what one event frees), running jobs with
    predicted ends, a queue, and a sequence of events: a running job ends, or a job arrives."""
    nodes, running = {}, []
    for i in range(draw(st.integers(2, 5))):
        gpu_type = draw(st.sampled_from(sorted(TYPES)))
        total = draw(st.sampled_from([2, 4]))
        busy = draw(st.integers(0, total))
        nodes[f"n{i}"] = NodeState(f"n{i}", gpu_type, total, list(range(busy, total)))
        if busy:  # a menu with other types and widths: growth may move it to free GPUs
            duration_s = draw(st.floats(10.0, 5e4))
            menu = (option(gpu_type, busy, duration_s),) + tuple(
                option(other, gpus, duration_s * TYPES[other] / TYPES[gpu_type] * busy / gpus)
                for other in sorted(draw(st.sets(st.sampled_from(sorted(TYPES)))))
                for gpus in sorted(draw(st.sets(st.sampled_from([1, 2, 4]), min_size=1)))
                if (other, gpus) != (gpu_type, busy))
            running.append(RunningJob(f"r{i}", menu[0], ((f"n{i}", tuple(range(busy))),), 0.0,
                                      duration_s, menu))
    queue = [draw(queued_jobs(f"j{j}", 0.0)) for j in range(draw(st.integers(1, 24)))]
    events = []
    for e in range(draw(st.integers(1, 5))):
        gap_s = draw(st.floats(1.0, 600.0))
        if draw(st.booleans()):
            events.append((gap_s, "end", draw(st.integers(0, 99)), None))
        else:
            events.append((gap_s, "arrive", 0, draw(queued_jobs(f"e{e}", 0.0))))
    return queue, ClusterView(nodes), running, events


def apply(answer: list[Placement], queue: dict[str, QueuedJob], running: dict[str, RunningJob],
          cluster: ClusterView, now_s: float) -> None:
    """Execute an answer: reshaped and preempted jobs release first, then every placement or
    reshape takes its GPUs (ValueError on a GPU that is not free)."""
    for action in answer:
        if action.kind != PLACE:
            job = running.pop(action.job_id, None)
            assert job is not None, [(a.job_id, a.kind, a.option.gpu_type, a.option.num_gpus) for a in answer]
            cluster.give_back(job.assignments)
            if action.kind == PREEMPT:
                queue[job.job_id] = QueuedJob(job.job_id, job.submit_time_s, job.options)
            else:
                running[action.job_id] = replace(job, option=action.option,
                                                 assignments=action.assignments,
                                                 start_time_s=now_s, restarts=job.restarts + 1,
                                                 expected_end_s=now_s + action.option.duration_s)
    for action in answer:
        if action.kind == PLACE:
            job = queue.pop(action.job_id)
            running[action.job_id] = RunningJob(
                action.job_id, action.option, action.assignments, now_s,
                now_s + action.option.duration_s, job.options, submit_time_s=job.submit_time_s)
        if action.kind != PREEMPT:
            cluster.take(action.assignments)


def decide_through(scenario, config: HasConfig) -> list[list[Placement]]:
    """The fast and the straightforward policy through the scenario's events; asserts that
    they give the same answer at every decision and returns the answers."""
    first_queue, first_cluster, first_running, events = scenario
    queue = {j.job_id: j for j in first_queue}
    running = {r.job_id: r for r in first_running}
    cluster = first_cluster.copy()
    fast, plain = HasPolicy(config), HasPolicy(config, shortcuts=False)
    answers, now_s = [], 200.0
    for gap_s, kind, which, job in [(0.0, "", 0, None)] + events:
        now_s += gap_s
        if kind == "end" and running:
            ended = running.pop(sorted(running)[which % len(running)])
            cluster.give_back(ended.assignments)
        elif kind == "arrive":
            queue[job.job_id] = replace(job, submit_time_s=now_s,
                                        deadline_s=job.deadline_s and now_s + job.deadline_s)
        args = (list(queue.values()), cluster, now_s, list(running.values()))
        answer = fast.schedule(*args)
        assert answer == plain.schedule(*args), f"decision {len(answers)} at {now_s} s"
        apply(answer, queue, running, cluster, now_s)
        answers.append(answer)
    return answers


@pytest.mark.parametrize("every", [1, 3])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(scenarios(), st.sampled_from(CONFIGS))
def test_early_stop_decides_like_the_whole_walk(monkeypatch, every, scenario, config) -> None:
    """The stop looked for after every job (and every third): the most chances to stop one
    job too early. The production interval (`_IDLE_CHECK`) only looks less often."""
    monkeypatch.setattr(has, "_IDLE_CHECK", every)
    decide_through(scenario, config)


def record_looks(monkeypatch) -> list[tuple[int, int | None]]:
    """Every look for the early stop: (position, the stop `_Pass.idle_from` found)."""
    looked: list[tuple[int, int | None]] = []
    original = has._Pass.idle_from

    def recording(self, ordered, position, line=None):
        found = original(self, ordered, position, line)
        looked.append((position, None if found is None else found[0]))
        return found

    monkeypatch.setattr(has._Pass, "idle_from", recording)
    return looked


def one_t4_free() -> tuple[ClusterView, list[RunningJob]]:
    """Both A100s busy until t=300, one of two T4s until t=1000, the other free."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 2, []),
                           "t": NodeState("t", "T4", 2, [1])})
    running = [RunningJob("r", option("T4", 1, 1.0), (("t", (0,)),), 0.0, 1000.0),
               RunningJob("s", option("A100-80GB", 2, 1.0), (("a", (0, 1)),), 0.0, 300.0)]
    return cluster, running


def test_the_last_job_that_can_start_is_not_skipped(monkeypatch) -> None:
    """Worked by hand. One T4 GPU is free; a job that wants both T4s holds and reserves
    them (shadow: r's end at 1,000 s), which claims the only free type, so the stop is looked
    for. The jobs after it hold for the A100s (their T4 options run 8x longer), except the
    last in the order, the longest: it has only a T4 option, short enough to end before the
    shadow, so it backfills onto the free T4. The stop must fall after it, not before.
    ("wide" has a 1-GPU option too, 50x longer: so it passes the filter and is scored.)"""
    monkeypatch.setattr(has, "_IDLE_CHECK", 1)
    cluster, running = one_t4_free()
    queue = [QueuedJob("wide", 0.0, (option("T4", 2, 100.0), option("T4", 1, 5000.0))),
             QueuedJob("fast", 0.0, (option("A100-80GB", 1, 200.0), option("T4", 1, 1600.0))),
             QueuedJob("last", 0.0, (option("T4", 1, 700.0),))]
    # without the fair share, which would cap "wide" at one of the two T4s (three jobs want T4)
    config = HasConfig(launch_overhead_s=0.0, elastic=False, fair_share=False)
    looked = record_looks(monkeypatch)
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running)
    assert [(p.job_id, p.assignments) for p in fast] == [("last", (("t", (1,)),))]
    assert looked == [(1, 3)]  # looked for once "wide" claimed T4: after "last", not at it


def test_the_walk_stops_before_jobs_that_cannot_start(monkeypatch) -> None:
    """The same cluster, with the last job too long to end before the shadow: the stop falls
    right after the first job (whose hold claimed T4), so the other two are never scored."""
    monkeypatch.setattr(has, "_IDLE_CHECK", 1)
    cluster, running = one_t4_free()
    queue = [QueuedJob("wide", 0.0, (option("T4", 2, 100.0), option("T4", 1, 5000.0))),
             QueuedJob("slow", 0.0, (option("A100-80GB", 1, 2000.0), option("T4", 1, 16000.0))),
             QueuedJob("long", 0.0, (option("T4", 1, 20000.0),))]
    # without the fair share, which would cap "wide" at one of the two T4s (three jobs want T4)
    config = HasConfig(launch_overhead_s=0.0, elastic=False, fair_share=False)
    scored: list[str] = []
    original = HasPolicy._score

    def counting(facts, state):
        scored.append(facts.job.job_id)
        return original(facts, state)

    monkeypatch.setattr(HasPolicy, "_score", staticmethod(counting))
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert scored == ["wide"]
    scored.clear()
    assert HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running) == fast == []
    assert scored == ["wide", "slow", "long"]


def test_two_deadline_jobs_do_not_preempt_the_same_job_twice() -> None:
    """Found by the property test above (main has it too): two urgent deadline jobs at the
    head of the order, the first needs 2 T4s, the second all 4, held by two running jobs.
    The first one's reclaim preempts one; the second's must not count that one again (the
    simulator raises on a job acted on twice in one answer; its GPUs would be released
    twice): it preempts the other."""
    cluster = ClusterView({"n": NodeState("n", "T4", 4, [])})
    menu = (option("T4", 2, 1e5),)
    running = [RunningJob("r1", menu[0], (("n", (0, 1)),), 0.0, 5e4, menu),
               RunningJob("r2", menu[0], (("n", (2, 3)),), 0.0, 4e4, menu)]
    queue = [QueuedJob("d0", 0.0, (option("T4", 2, 600.0),), 700.0),
             QueuedJob("d1", 0.0, (option("T4", 4, 600.0),), 800.0)]
    for policy in (HasPolicy(), HasPolicy(shortcuts=False)):
        answer = policy.schedule(queue, cluster, 100.0, running)
        acted = [a.job_id for a in answer]
        assert len(acted) == len(set(acted)), answer
        assert sorted(a.job_id for a in answer if a.kind == PREEMPT) == ["r1", "r2"]


def test_a_free_type_nobody_claimed_yet_keeps_the_walk_going(monkeypatch) -> None:
    """Worked by hand: condition (a). One T4 GPU is free and no job can start on it (every
    job's T4 option needs 2), but the walk may not stop before the old job that reserves
    the T4s: without that reservation, growth would give the free T4 to r (3 -> 4 GPUs, half
    its time left). With it, growth gives nothing, and neither does the fast path."""
    monkeypatch.setattr(has, "_IDLE_CHECK", 1)
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 2, []),
                           "t": NodeState("t", "T4", 4, [3])})
    wider = (option("T4", 3, 3e4), option("T4", 4, 1.5e4))
    running = [RunningJob("r", wider[0], (("t", (0, 1, 2)),), 0.0, 3e4, wider),
               RunningJob("s", option("A100-80GB", 2, 1.0), (("a", (0, 1)),), 0.0, 5e3)]
    queue = [QueuedJob("first", -2e5, (option("A100-80GB", 2, 100.0),)),
             QueuedJob("old", -1e5, (option("T4", 2, 100.0),))]
    config = HasConfig(launch_overhead_s=0.0)
    looked = record_looks(monkeypatch)
    fast = HasPolicy(config).schedule(queue, cluster, 100.0, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, 100.0, running) == []
    assert looked == [(1, None)]  # T4 not claimed at "old": no stop
    # what skipping "old" would have meant: growth takes the T4 for r
    assert [(a.job_id, a.kind, a.option.num_gpus) for a in HasPolicy(config).schedule(
        queue[:1], cluster, 100.0, running)] == [("r", "resize", 4)]


def test_a_running_job_in_line_after_the_stop_still_takes_its_turn(monkeypatch) -> None:
    """Worked by hand. One A100 GPU is free; "s" holds the other until 50,400 s. "wide" wants
    both A100s (100 s), holds and reserves them (shadow 50,400 s), which claims the only free
    type, so the stop is looked for after it. "slow" (keyed 5,000: 5,000 s, submitted at 0)
    needs 5,000 s on one A100, more than the 400 s to the shadow, so no queued job after
    "wide" can start: the queue's stop is right after "wide". But "mover", running on a T4
    with a tenth of its work left (2,400 s there, 300 s on an A100), is in line keyed 10,300
    (300 + aging 0.2 x now 50,000), after "slow", and its 300 s end before the shadow: the
    stop must fall after it, and it migrates to the free A100 (gain 2,400 -> 420 s with the
    120 s restart floor, over the 720 s floor). Looked for once, at 1: the stop at 2 (past
    "slow", which is walked) and "mover" taken after the queue."""
    monkeypatch.setattr(has, "_IDLE_CHECK", 1)
    now_s = 50_000.0
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 2, [1]),
                           "t": NodeState("t", "T4", 1, [])})
    mover_menu = (option("T4", 1, 24_000.0), option("A100-80GB", 1, 3_000.0))
    running = [RunningJob("s", option("A100-80GB", 1, 1.0), (("a", (0,)),), 40_000.0, 50_400.0),
               RunningJob("mover", mover_menu[0], (("t", (0,)),), now_s - 21_600.0,
                          now_s + 2_400.0, mover_menu)]
    queue = [QueuedJob("wide", 0.0, (option("A100-80GB", 2, 100.0),
                                     option("A100-80GB", 1, 5000.0))),
             QueuedJob("slow", 0.0, (option("A100-80GB", 1, 5000.0),))]
    config = HasConfig(launch_overhead_s=0.0, fair_share=False)
    looked = record_looks(monkeypatch)
    fast = HasPolicy(config).schedule(queue, cluster, now_s, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, now_s, running)
    assert [(p.job_id, p.kind, p.assignments) for p in fast] == [
        ("mover", MIGRATE, (("a", (1,)),))]
    assert looked == [(1, 2)]


def test_a_running_job_in_line_moves_to_a_narrow_option_listed_after_a_wide_one() -> None:
    """Worked by hand. One A100 GPU is free; "mover" runs on a T4 with a tenth of its work
    left (2,400 s there). Its menu lists 2 A100s (150 s left) before 1 A100 (300 s left):
    only the one fits. It is in line keyed 10,150 (150 + aging 0.2 x now 50,000), ahead of
    "later" (10,000 s on 2 A100s, submitted now: keyed 20,000), which then holds for the
    A100s, so growth gives them to no one: the move is the mover's turn in line (2,400 ->
    420 s with the 120 s restart floor). A look at its options for one that fits stops at the
    first wider than any type has free, so they are looked at fewest GPUs first, not in the
    menu's order."""
    now_s = 50_000.0
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 2, [1]),
                           "t": NodeState("t", "T4", 1, [])})
    mover_menu = (option("T4", 1, 24_000.0), option("A100-80GB", 2, 1_500.0),
                  option("A100-80GB", 1, 3_000.0))
    running = [RunningJob("s", option("A100-80GB", 1, 1.0), (("a", (0,)),), 40_000.0, 90_000.0),
               RunningJob("mover", mover_menu[0], (("t", (0,)),), now_s - 21_600.0,
                          now_s + 2_400.0, mover_menu)]
    queue = [QueuedJob("later", now_s, (option("A100-80GB", 2, 10_000.0),))]
    config = HasConfig(launch_overhead_s=0.0, fair_share=False)
    fast = HasPolicy(config).schedule(queue, cluster, now_s, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, now_s, running)
    assert [(p.job_id, p.kind, p.option.num_gpus, p.assignments) for p in fast] == [
        ("mover", MIGRATE, 1, (("a", (1,)),))]
    assert fast[0].decision.reason.startswith("migrate: its turn for faster GPUs")
