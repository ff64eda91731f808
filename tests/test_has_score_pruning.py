"""has's scoring skips the hold value of a dominated option (an option of the same type with no
more GPUs comes before it in cost order): the marks against their definition, and a hand-worked
case where a skipped option is the only one that starts now (the skip covers holds only)."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.core import ClusterView, NodeState, QueuedJob, RunningJob
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.policies.has import HasConfig, HasPolicy, _Pass, _ReleaseProfile, _fits_now


def option(gpu_type: str, gpus: int, duration_s: float, tp: int = 1) -> PlanOption:
    return PlanOption(gpu_type, ParallelPlan(dp=gpus // tp, tp=tp), 1, 1.0, duration_s)


CLUSTER = ClusterView({"a": NodeState("a", "A", 8, list(range(8))),
                       "b": NodeState("b", "B", 8, list(range(8)))})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("AB"), st.sampled_from([1, 2, 4, 8]),
                          st.floats(1.0, 1e5)), min_size=1, max_size=12),
       st.sampled_from([0.0, 0.5, 1.0]))
def test_dominated_marks_follow_their_definition(menu, exponent) -> None:
    job = QueuedJob("j", 0.0, tuple(option(t, g, d) for t, g, d in menu))
    facts = HasPolicy()._derive_facts(job, FreeIndex(CLUSTER))
    facts.scored(exponent)
    costs, by_cost = [row.cost for row in facts.by_rank], [row.rank for row in facts.rows]
    for position, rank in enumerate(by_cost):
        _, gpu_type, gpus, _, _, _ = facts.entries[rank]
        earlier = [facts.entries[r] for r in by_cost[:position]]
        assert facts.by_rank[rank].dominated == any(t == gpu_type and g <= gpus
                                            for _, t, g, _, _, _ in earlier)
        if position:  # what the skip relies on: cost order, so nothing after is cheaper
            assert costs[by_cost[position - 1]] <= costs[rank]
    rows = facts.rows
    facts.scored(exponent)
    assert facts.rows is rows  # kept while the exponent is


def _scoring(facts) -> tuple:
    """All a scoring sets, the rows' own fields included."""
    return (facts.exponent, facts.dominated_min_gpus,
            [(row.rank, row.cost, row.dominated) for row in facts.rows],
            [row.rank for row in facts.open_rows],
            [(row.cost, row.dominated) for row in facts.by_rank])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("AB"), st.sampled_from([1, 2, 3, 4, 8]),
                          st.floats(1.0, 1e5)), min_size=1, max_size=16),
       st.lists(st.sampled_from([i / 16 for i in range(17)]), min_size=1, max_size=12))
# With its 60 s launch, 200 s on 8 GPUs (rank 0) and 400 s on 1 cost 800 and 400 at exponent
# 1, and tie at 400 at exponent 0.5 (200 x (1600 / 400) ** 0.5): from the order at 1 the
# rescoring must move the faster one back in front
@example([("A", 8, 140.0), ("B", 1, 340.0)], [1.0, 0.5])
# of one type, the 8-GPU option is dominated at exponent 1 and not at 0.5: swapped back to 1,
# the marks must be those of 1 again
@example([("A", 8, 140.0), ("A", 1, 340.0)], [1.0, 0.5, 1.0])
def test_a_rescoring_sets_what_a_first_scoring_at_that_exponent_would(menu, exponents) -> None:
    """Rows rewritten in place and sorted from the order before (or swapped back to the
    scoring before) say the same as a job scored at that exponent first: ties by rank
    included, as `sorted` by cost orders them."""
    job = QueuedJob("j", 0.0, tuple(option(t, g, d) for t, g, d in menu))
    facts = HasPolicy()._derive_facts(job, FreeIndex(CLUSTER))
    for exponent in exponents:
        facts.scored(exponent)
        fresh = HasPolicy(HasConfig(gpu_cost_weight=exponent))._derive_facts(
            job, FreeIndex(CLUSTER))
        fresh.scored(exponent)
        assert _scoring(facts) == _scoring(fresh)
        costs = [row.cost for row in facts.by_rank]
        by_cost = sorted(range(len(costs)), key=costs.__getitem__)
        assert [row.rank for row in facts.rows] == by_cost


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("AB"), st.sampled_from([1, 2, 3, 4, 8]),
                          st.floats(1.0, 1e4)), min_size=1, max_size=12),
       st.integers(0, 9), st.integers(0, 9), st.floats(0.0, 2e4), st.booleans())
@example([("A", 8, 10.0), ("A", 1, 625.0)], 4, 0, 1000.0, True)  # the fastest does not fit
def test_a_ladder_answers_as_a_look_at_every_option_would(menu, have, spare, shadow_s,
                                                          reserved) -> None:
    """`_fits_now` on a type's ladder against every option of the type: does one fit the
    free GPUs and pass the reservation (within its spare GPUs, or ending by its shadow)?"""
    # wider is mostly faster, as in MARP's menus: the fastest option often does not fit
    job = QueuedJob("j", 0.0, tuple(option(t, g, d * 8 / g) for t, g, d in menu))
    facts = HasPolicy(HasConfig(launch_overhead_s=0.0))._derive_facts(job, FreeIndex(CLUSTER))
    if not reserved:
        spare, shadow_s = have, float("inf")
    for gpu_type, ladder in facts.ladders.items():
        expected = any(gpus <= have and (gpus <= spare or 100.0 + total_s <= shadow_s)
                       for _, t, gpus, total_s, _, _ in facts.entries if t == gpu_type)
        assert _fits_now(ladder, have, spare, shadow_s, 100.0) == expected
    assert list(facts.ladders) == [gpu_type for gpu_type, _ in facts.need]
    assert all(ladder[-1][0] == gpus for (_, gpus), ladder in
               zip(facts.need, facts.ladders.values()))


def test_a_new_job_is_scored_at_the_saturated_exponent_when_derived() -> None:
    """A walk reaches a job deep in the queue only when the queue is long, i.e. at the
    saturated pressure: the job arrives scored for it, so that first deep walk does not score
    hundreds of jobs at once (the per-event decision-time tail, docs/has-performance.md)."""
    job = QueuedJob("j", 0.0, (option("A", 1, 100.0), option("A", 8, 20.0), option("B", 2, 60.0)))
    for config, exponent in ((HasConfig(), 1.0), (HasConfig(gpu_cost_weight=0.5), 0.5),
                             (HasConfig(gpu_cost_weight=0.5, min_cost_exponent=0.7), 0.7)):
        facts = HasPolicy(config)._derive_facts(job, FreeIndex(CLUSTER))
        assert facts.exponent == exponent
        rows = facts.rows
        facts.scored(exponent)
        assert facts.rows is rows  # nothing to redo at that pressure


def test_a_dominated_option_still_starts_now() -> None:
    """Worked by hand: type A has 2 GPUs free, 6 busy until t=950. "big" (first in order:
    100 s on 8 A GPUs, or a million seconds on the one free B GPU) holds for A and reserves
    it from t=950 with no spare GPUs. The queue's pressure (demand 10 on 3 free GPUs) makes
    cost = duration x GPU-seconds / the job's least: j's 1-GPU option (1,000 s, cost 1,000)
    is cheaper than its 2-GPU one (900 s, cost 1,620), which is therefore dominated as a
    hold; but only the 2-GPU one ends before the reservation, so it is the one that starts,
    with or without the skip."""
    cluster = ClusterView({"a": NodeState("a", "A", 8, [6, 7]), "b": NodeState("b", "B", 1, [0])})
    running = [RunningJob("r", option("A", 6, 1.0), (("a", tuple(range(6))),), 0.0, 950.0)]
    queue = [QueuedJob("big", 0.0, (option("A", 8, 100.0), option("B", 1, 1e6))),
             QueuedJob("j", 0.0, (option("A", 1, 1000.0), option("A", 2, 900.0))),
             QueuedJob("tail", 0.0, (option("A", 8, 1e5),))]
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    fast = HasPolicy(config).schedule(queue, cluster, 0.0, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, 0.0, running)
    assert [(p.job_id, p.option.num_gpus) for p in fast] == [("j", 2)]


def test_when_every_hold_waits_forever_the_dominated_option_breaks_the_tie() -> None:
    """Worked by hand: type A has one GPU free on each of two nodes and no running job to
    release more, so every A option waits forever. j's options use tensor parallelism 2, so
    its 2-GPU option fits by count but not on either node (a tp group never straddles nodes):
    `_Pass.waits_forever` cannot rule out a start, and `_score` scans the undominated options
    alone (no dominated option, 4 GPUs, can start now). Under pressure (exponent 1) the 2-GPU
    option (1,000 s, cost 1,000) comes before the 4-GPU one (900 s, cost 1,620), which is
    dominated; both values are infinite and the lower rank, the faster 4-GPU option, wins the
    tie: the scan of the undominated options alone would hold for the 2-GPU one, so when its
    hold waits forever the answer is the fastest option's."""
    cluster = ClusterView({"a1": NodeState("a1", "A", 2, [1]), "a2": NodeState("a2", "A", 2, [1])})
    job = QueuedJob("j", 0.0, (option("A", 2, 1000.0, tp=2), option("A", 4, 900.0, tp=2)))
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    answers = []
    for prune in (True, False):
        index = FreeIndex(cluster)
        facts = HasPolicy(config)._derive_facts(job, index)
        state = _Pass(index, _ReleaseProfile([], 0.0), 0.0, 1.0, prune_holds=prune)
        facts.scored(1.0)
        assert facts.dominated_min_gpus == 4 > state.most_free
        assert not state.waits_forever(facts)
        row, assignments = HasPolicy._score(facts, state)
        answers.append((row.option, assignments))
    assert answers[0] == answers[1]
    held, assignments = answers[0]
    assert (held.num_gpus, assignments) == (4, None)


def test_a_job_that_waits_forever_is_held_for_its_fastest_option_within_its_share() -> None:
    """Worked by hand: every GPU is busy and no running job will release any, so every option
    waits forever and the scan names the hold at its first (`_Pass.waits_forever`). The
    fastest option, 8 A GPUs, is over the job's share of A (4 GPUs): the hold is the fastest
    within it, 4 A GPUs, as the scan of every option finds; without shares, the 8."""
    cluster = ClusterView({"a": NodeState("a", "A", 8, []), "b": NodeState("b", "B", 1, [])})
    job = QueuedJob("j", 0.0, (option("A", 8, 100.0), option("A", 4, 180.0),
                               option("B", 1, 1e6)))
    config = HasConfig(launch_overhead_s=0.0, elastic=False)
    for share, gpus in (({"A": 4, "B": 1}, 4), (None, 8)):
        answers = []
        for prune in (True, False):
            index = FreeIndex(cluster)
            facts = HasPolicy(config)._derive_facts(job, index)
            state = _Pass(index, _ReleaseProfile([], 0.0), 0.0, 1.0, prune_holds=prune,
                          share=share)
            assert state.waits_forever(facts)
            row, assignments = HasPolicy._score(facts, state)
            answers.append((row.option, assignments))
        assert answers[0] == answers[1]
        held, assignments = answers[0]
        assert (held.gpu_type, held.num_gpus, assignments) == ("A", gpus, None)
