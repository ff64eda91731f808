"""Every policy: no double booking, only free GPUs of the option's type; policy-specific rules."""
from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy.domain import ParallelPlan, PlanOption
from frenzy.placement_check import NodeFacts, placement_problem
from frenzy_scheduler.core import (MIGRATE, PLACE, Alternative, ClusterView, Decision, NodeState,
                                   Placement, QueuedJob, RunningJob)
from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.policies import get_policy, policy_names
from frenzy_scheduler.policies.frenzy import FrenzyNarrowPolicy, FrenzyPolicy
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from frenzy_scheduler.policies.sia import SiaConfig, SiaPolicy, _Job

GIB = 1024**3
TYPES = {"T4": 8.0, "V100-32GB": 3.0, "A100-80GB": 1.0}  # type -> relative step time (slower = larger)


def option(gpu_type: str, gpus: int, duration_s: float, tp: int = 1, peak_gib: int = 10) -> PlanOption:
    return PlanOption(gpu_type, ParallelPlan(dp=gpus // tp, tp=tp), peak_gib * GIB, 1.0, duration_s)


def job(job_id: str, submit_s: float, *options: PlanOption, deadline_s: float = 0.0) -> QueuedJob:
    return QueuedJob(job_id, submit_s, tuple(options), deadline_s)


def nodes(spec: dict[str, tuple[str, int, list[int]]]) -> ClusterView:
    return ClusterView({n: NodeState(n, t, total, list(free)) for n, (t, total, free) in spec.items()})


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[QueuedJob], ClusterView]:
    spec = {}
    for i in range(draw(st.integers(1, 6))):
        gpu_type = draw(st.sampled_from(sorted(TYPES)))
        total = draw(st.sampled_from([1, 2, 4, 8]))
        free = sorted(draw(st.sets(st.integers(0, total - 1))))
        spec[f"n{i}"] = (gpu_type, total, free)
    queue = []
    for j in range(draw(st.integers(0, 12))):
        base = draw(st.floats(10.0, 1e5))
        count = draw(st.sampled_from([1, 2, 4, 8, 16]))
        tp = draw(st.sampled_from([1, 2])) if count > 1 else 1
        chosen = draw(st.sets(st.sampled_from(sorted(TYPES)), min_size=1))
        opts = [option(t, count, base * TYPES[t], tp) for t in sorted(chosen)]
        queue.append(job(f"j{j}", draw(st.floats(0.0, 100.0)), *opts))
    return queue, nodes(spec)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_policy_double_books_or_uses_busy_or_wrong_type_gpus(scenario) -> None:
    queue, cluster = scenario
    before = {n: list(s.free_gpus) for n, s in cluster.nodes.items()}
    for name in policy_names():
        placements = get_policy(name).schedule(queue, cluster, 200.0)
        assert {n: s.free_gpus for n, s in cluster.nodes.items()} == before, name  # not mutated
        by_id = {j.job_id: j for j in queue}
        used: set[tuple[str, int]] = set()
        assert len({p.job_id for p in placements}) == len(placements), name
        facts = {n: NodeFacts(s.gpu_type, set(before[n])) for n, s in cluster.nodes.items()}
        for p in placements:
            # frenzy may span memory tiers with the plan of one of the job's options
            assert any(o.plan == p.option.plan for o in by_id[p.job_id].options), name
            assert not placement_problem(p.option.gpu_type, p.option.num_gpus, p.option.plan.tp,
                                         p.assignments, facts), name
            assert p.decision is not None and p.decision.reason, name
            for node_id, gpus in p.assignments:
                for g in gpus:
                    assert g in before[node_id], name
                    assert (node_id, g) not in used, name
                    used.add((node_id, g))


def test_fifo_serves_in_arrival_order_with_head_of_line_blocking() -> None:
    cluster = nodes({"a": ("T4", 4, [0, 1, 2, 3])})
    queue = [job("late", 5.0, option("T4", 1, 10.0)), job("big", 1.0, option("T4", 8, 10.0)),
             job("early", 0.0, option("T4", 2, 10.0))]
    placed = get_policy("fifo").schedule(queue, cluster, 10.0)
    assert [p.job_id for p in placed] == ["early"]  # "big" blocks "late"


def test_frenzy_narrow_takes_smallest_memory_tier_then_escalates() -> None:
    plan_options = (option("T4", 2, 500.0), option("A100-80GB", 2, 60.0))
    cluster = nodes({"t": ("T4", 2, [0, 1]), "a": ("A100-80GB", 8, list(range(8)))})
    first = FrenzyNarrowPolicy().schedule([job("x", 0, *plan_options)], cluster, 0.0)
    assert first[0].option.gpu_type == "T4"  # smallest tier that fits, although slower
    cluster.nodes["t"].free_gpus = [0]  # T4 tier ran out -> escalate to the 80 GB tier
    second = FrenzyNarrowPolicy().schedule([job("x", 0, *plan_options)], cluster, 0.0)
    assert second[0].option.gpu_type == "A100-80GB"
    # fewer GPUs beats less memory: plans are sorted by (GPU count, memory per GPU)
    three = FrenzyNarrowPolicy().schedule(
        [job("y", 0, option("A100-80GB", 1, 90.0, peak_gib=60), option("T4", 2, 400.0))],
        nodes({"t": ("T4", 2, [0, 1]), "a": ("A100-80GB", 8, [0])}), 0.0)
    assert three[0].option.num_gpus == 1


def test_frenzy_follows_the_public_codes_loop_on_a_hand_worked_instance() -> None:
    """scheduler_Frenzy.py try_allocate_job_to_cluster, worked by hand.

    Nodes (idle GPUs, type): t4-a (2, T4 16 GB), t4-b (1, T4), v100 (4, V100 32 GB),
    a100 (8, A100 80 GB). The job's plans all need 10 GiB per GPU: tier 16 GB, and
    free_gpu_ge[16 GB] = 15, so every plan fits and the loop (no break) ends on the widest,
    8 GPUs. Node order (idle ascending, FLOPs descending): t4-b, t4-a, v100, a100.
    16 GB tier: no node covers 8; take the last in order (t4-a, 2), then t4-b (1); tier empty:
    escalate to 32 GB: v100 does not cover the 5 left, take it whole (4); escalate to 80 GB:
    a100 covers the last 1. Mixed tiers: timed on the slowest node's type, T4."""
    opts = [option(t, n, 1000.0 / n * TYPES[t]) for n in (1, 2, 4, 8) for t in TYPES]
    cluster = nodes({"t4-a": ("T4", 2, [0, 1]), "t4-b": ("T4", 2, [1]),
                     "v100": ("V100-32GB", 4, [0, 1, 2, 3]), "a100": ("A100-80GB", 8, list(range(8)))})
    [placed] = FrenzyPolicy().schedule([job("x", 0, *opts)], cluster, 0.0)
    assert placed.option.num_gpus == 8 and placed.option.gpu_type == "T4"
    assert placed.option == option("T4", 8, 1000.0 / 8 * TYPES["T4"])
    assert dict(placed.assignments) == {"t4-a": (0, 1), "t4-b": (1,), "v100": (0, 1, 2, 3),
                                        "a100": (0,)}
    # The narrow reading takes the fewest GPUs on the smallest tier instead.
    [narrow] = FrenzyNarrowPolicy().schedule([job("x", 0, *opts)], cluster, 0.0)
    assert narrow.option.num_gpus == 1 and narrow.option.gpu_type == "T4"
    assert narrow.assignments == (("t4-b", (1,)),)


def test_frenzy_widest_plan_is_bounded_by_its_tier() -> None:
    """A 20 GiB plan needs the 32 GB tier: free_gpu_ge[32 GB] = 4 + 2 = 6, so the 8-GPU plan
    does not fit and the loop's last fitting plan is the 4-GPU one; v100 covers it alone."""
    opts = [option(t, n, 1000.0, peak_gib=20) for n in (1, 2, 4, 8) for t in ("V100-32GB", "A100-80GB")]
    cluster = nodes({"t4": ("T4", 2, [0, 1]), "v100": ("V100-32GB", 4, [0, 1, 2, 3]),
                     "a100": ("A100-80GB", 8, [0, 1])})
    [placed] = FrenzyPolicy().schedule([job("x", 0, *opts)], cluster, 0.0)
    assert placed.option.num_gpus == 4 and placed.assignments == (("v100", (0, 1, 2, 3)),)


def test_has_picks_the_option_that_finishes_first() -> None:
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, list(range(8)))})
    placed = HasPolicy().schedule([job("x", 0, option("T4", 1, 800.0), option("A100-80GB", 1, 100.0))],
                                  cluster, 0.0)
    assert placed[0].option.gpu_type == "A100-80GB"


def test_has_waits_for_fast_gpus_when_that_finishes_earlier() -> None:
    busy = option("A100-80GB", 8, 100.0)
    running = [RunningJob("r", busy, (("a", tuple(range(8))),), 0.0, 60.0)]  # frees at t=60
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [])})
    queue = [job("x", 0, option("T4", 1, 8000.0), option("A100-80GB", 1, 1000.0))]
    assert HasPolicy().schedule(queue, cluster, 10.0, running) == []  # 50 s wait + 1000 < 8000
    # Without knowledge of running jobs there is nothing to wait for: start on the T4.
    assert HasPolicy().schedule(queue, cluster, 10.0)[0].option.gpu_type == "T4"


def test_has_records_the_chosen_option_and_the_next_cheapest_with_the_launch_included() -> None:
    """The decision record gives HAS's own estimates, launch (60 s on one node) plus run for
    every option, the chosen one too. Worked by hand: 4 of the 8 A100s are free and the other
    4 free up at t = 500. The 8-A100 option would end at 400 + 60 + 700 = 1160 s from now,
    and it is wider than the job's fair share (8 A100s over 2 jobs that want them); 4 A100s
    now end at 60 + 1000 = 1060 s; the T4s at 60 + 9000."""
    running = [RunningJob("r", option("A100-80GB", 4, 100.0), (("a", (4, 5, 6, 7)),), 0.0, 500.0)]
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [0, 1, 2, 3])})
    wide, narrow, slow = option("A100-80GB", 8, 700.0), option("A100-80GB", 4, 1000.0), \
        option("T4", 4, 9000.0)
    placed = HasPolicy().schedule([job("x", 0, wide, narrow, slow)], cluster, 100.0, running)
    assert [p.option for p in placed] == [narrow]
    assert placed[0].decision.alternatives == (
        (narrow, 0.0, 1060.0, "chosen"),
        (wide, 400.0, 1160.0, "wider than its fair share of A100-80GB (4 GPUs)"),
        (slow, 0.0, 9060.0, "later completion"))


def test_has_records_read_after_the_pass_keep_the_estimates_of_their_own_placement() -> None:
    """has drafts its records and builds their rows when read (core.Decision). Worked by hand:
    x (1000 s on the 4 A100s, 9000 s on the 4 T4s) goes first and takes the A100s; its T4
    option could start now (0 s, 60 + 9000 s). y then takes every T4. Read after the pass, x's
    record must still say what x saw at its own placement, not that the T4s are gone."""
    cluster = nodes({"a": ("A100-80GB", 4, [0, 1, 2, 3]), "t": ("T4", 4, [0, 1, 2, 3])})
    fast_x, slow_x, only_y = option("A100-80GB", 4, 1000.0), option("T4", 4, 9000.0), \
        option("T4", 4, 2000.0)
    placed = HasPolicy().schedule([job("x", 0, fast_x, slow_x), job("y", 0, only_y)],
                                  cluster, 100.0)
    assert [(p.job_id, p.option) for p in placed] == [("x", fast_x), ("y", only_y)]
    x, y = placed[0].decision, placed[1].decision
    assert x.alternatives == ((fast_x, 0.0, 1060.0, "chosen"),
                              (slow_x, 0.0, 9060.0, "later completion"))
    assert y.alternatives == ((only_y, 0.0, 2060.0, "chosen"),)


def test_a_drafted_decision_reads_equals_and_prints_as_one_built_at_once() -> None:
    """core.Decision: the draft is built once, on first read; the record compares, hashes and
    prints as the named tuple it replaced (bench/has_digest.py hashes the repr)."""
    alternative = Alternative(option("T4", 1, 10.0), 0.0, 70.0, "chosen")
    builds = []

    def build(draft: tuple) -> tuple[Alternative, ...]:
        builds.append(draft)
        return draft[1:]

    drafted = Decision("has", "why", (), (build, alternative))
    eager = Decision("has", "why", (alternative,))
    assert builds == []  # nothing built before it is read
    assert drafted == eager and hash(drafted) == hash(eager) and repr(drafted) == repr(eager)
    assert drafted.alternatives == (alternative,) and len(builds) == 1  # once
    assert repr(eager) == ("Decision(policy='has', reason='why', alternatives=("
                           f"{alternative!r},))")
    assert drafted != Decision("has", "other", (alternative,))


def test_a_placement_compares_hashes_and_prints_as_the_frozen_dataclass_it_replaced() -> None:
    """core.Placement is a plain class with slots (cheaper to build than a frozen dataclass);
    it compares and hashes by every field, and bench/has_digest.py hashes its repr."""
    chosen = option("T4", 2, 10.0)
    record = Decision("has", "why", (Alternative(chosen, 0.0, 70.0, "chosen"),))
    placed = Placement("j", chosen, (("n0", (0, 1)),), decision=record)
    same = Placement("j", chosen, (("n0", (0, 1)),), PLACE,
                     Decision("has", "why", (Alternative(chosen, 0.0, 70.0, "chosen"),)))
    assert placed == same and hash(placed) == hash(same) and len({placed, same}) == 1
    assert repr(placed) == (f"Placement(job_id='j', option={chosen!r}, "
                            f"assignments=(('n0', (0, 1)),), kind='place', decision={record!r})")
    slower = option("T4", 2, 20.0)
    for other in (Placement("k", chosen, (("n0", (0, 1)),), decision=record),
                  Placement("j", slower, (("n0", (0, 1)),), decision=record),
                  Placement("j", chosen, (("n0", (0,)),), decision=record),
                  Placement("j", chosen, (("n0", (0, 1)),), MIGRATE, record),
                  Placement("j", chosen, (("n0", (0, 1)),))):
        assert placed != other
    assert placed != ("j", chosen, (("n0", (0, 1)),), PLACE, record)
    moved = placed.replaced(slower)
    assert moved == Placement("j", slower, (("n0", (0, 1)),), PLACE, record)
    assert placed.option == chosen  # the original is unchanged


def test_has_runs_shortest_first_and_honours_deadlines() -> None:
    cluster = nodes({"a": ("A100-80GB", 1, [0])})
    queue = [job("long", 0, option("A100-80GB", 1, 5000.0)), job("short", 50, option("A100-80GB", 1, 10.0))]
    assert HasPolicy().schedule(queue, cluster, 100.0)[0].job_id == "short"
    queue.append(job("due", 60, option("A100-80GB", 1, 3000.0), deadline_s=3500.0))
    assert HasPolicy().schedule(queue, cluster, 100.0)[0].job_id == "due"


def test_has_aging_lets_a_long_waiting_job_overtake_newcomers() -> None:
    cluster = nodes({"a": ("A100-80GB", 1, [0])})
    old = job("old", 0, option("A100-80GB", 1, 5000.0))
    new = job("new", 9000, option("A100-80GB", 1, 100.0))
    aged = HasPolicy(HasConfig(aging_rate=1.0)).schedule([old, new], cluster, 10_000.0)
    assert aged[0].job_id == "old"
    pure_srtf = HasPolicy(HasConfig(aging_rate=0.0)).schedule([old, new], cluster, 10_000.0)
    assert pure_srtf[0].job_id == "new"  # the control: without aging the newcomer wins


def test_sia_static_maximises_normalised_goodput_per_gpu() -> None:
    # One A100 and one T4 free; both jobs 8x faster on the A100. sia-static starts both jobs.
    cluster = nodes({"a": ("A100-80GB", 1, [0]), "t": ("T4", 1, [0])})
    queue = [job("x", 0, option("A100-80GB", 1, 100.0), option("T4", 1, 800.0)),
             job("y", 1, option("A100-80GB", 1, 100.0))]
    placed = {p.job_id: p.option.gpu_type for p in get_policy("sia-static").schedule(queue, cluster, 5.0)}
    assert placed == {"x": "T4", "y": "A100-80GB"}


def test_sia_objective_follows_the_artifact() -> None:
    """Same instance under elastic Sia's objective (p = -0.5, lambda_n = 1.1, minimised):
    x on the A100 and y left waiting costs 8^-0.5 + 1.1 = 1.45; x on the T4 and y on the
    A100 costs 1 + 1 = 2. Sia gives the A100 to x, as the artifact's MILP would."""
    cluster = nodes({"a": ("A100-80GB", 1, [0]), "t": ("T4", 1, [0])})
    queue = [job("x", 0, option("A100-80GB", 1, 100.0), option("T4", 1, 800.0)),
             job("y", 1, option("A100-80GB", 1, 100.0))]
    placed = {p.job_id: p.option.gpu_type for p in get_policy("sia").schedule(queue, cluster, 5.0)}
    assert placed == {"x": "A100-80GB"}


def test_sia_rounds_goodput_to_the_power_p_to_two_decimals_as_the_artifact() -> None:
    """sia-simulator/sia.py line 911 rounds goodput^p to 2 decimals before the MILP, so
    near-equal configurations tie (the cross-check against Sia's simulator found it)."""
    # slowest: 1 GPU, 800 s -> goodput 1; 8 GPUs, 100 s -> goodput 8, 8^-0.5 = 0.35355...
    row = _Job("x", [option("A100-80GB", 1, 800.0), option("A100-80GB", 8, 100.0)], 1.0)
    assert SiaPolicy()._coefficients(row, 0.0) == [1.0, 0.35]
    exact = SiaPolicy(SiaConfig(round_decimals=None))._coefficients(row, 0.0)
    assert math.isclose(exact[1], 8 ** -0.5)


def test_sia_rows_follow_submission_as_the_artifacts_job_list() -> None:
    """Sia's MILP rows follow its job list, the workload's order, queued and running jobs
    interleaved (`cluster.py` 46-64). The solver breaks ties by that order, so ours must
    match it: with queued jobs first, identical jobs swapped places far more than in Sia."""
    menu = (option("A100-80GB", 1, 100.0),)
    cluster = nodes({"a": ("A100-80GB", 2, [1])})
    running = [RunningJob("r", menu[0], (("a", (0,)),), 0.0, 100.0, menu, submit_time_s=2.0)]
    queue = [job("late", 5.0, *menu), job("early", 1.0, *menu), job("b", 2.0, *menu)]
    rows = SiaPolicy()._rows(queue, running, FreeIndex(cluster), 10.0)
    assert [row.job_id for row in rows] == ["early", "b", "r", "late"]  # ties: by job id


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), scenarios(), st.floats(0.0, 1e4), st.sampled_from([HasConfig(), HasConfig(reserve_after_s=50.0)]))
def test_has_decisions_do_not_depend_on_what_it_cached_before(first, second, end_s, config) -> None:
    """Cached per-job data and the kept queue order must never change a decision: a policy
    that saw another queue or cluster before decides like a fresh one (job ids are reused,
    with other options, and the same jobs meet another cluster, so stale entries would show)."""
    warm = HasPolicy(config)
    for queue, cluster in (first, (first[0], second[1]), second, second):
        running = [RunningJob(f"r-{n}", option(s.gpu_type, s.total_gpus - s.num_free, 1.0),
                              ((n, tuple(g for g in range(s.total_gpus) if g not in s.free_gpus)),),
                              0.0, end_s) for n, s in cluster.nodes.items() if s.num_free < s.total_gpus]
        assert warm.schedule(queue, cluster, 200.0, running) == \
            HasPolicy(config).schedule(queue, cluster, 200.0, running)


def test_frenzy_up_asks_the_scheduler_for_its_policies_and_names_the_option_it_rejects():
    """`frenzy up` imports no scheduler code (tests/test_layering.py): it asks
    `python -m frenzy_scheduler.policies`, which must answer with the registry."""
    from click.testing import CliRunner

    from frenzy.tools.localcluster import scheduler_policy_names, up_command

    assert scheduler_policy_names() == policy_names()
    result = CliRunner().invoke(up_command, ["--policy", "no-such-policy"])
    assert result.exit_code == 2
    assert "--policy" in result.output and "unknown policy 'no-such-policy'" in result.output


def test_has_counts_the_work_a_move_would_lose_in_its_restart_cost() -> None:
    """A job that cannot save on request loses the work since its last checkpoint on a move:
    that is part of the restart cost, so an old checkpoint blocks a move a fresh one allows."""
    menu = (PlanOption("A100-80GB", ParallelPlan(dp=1), 1, 1.0, 10_000.0),
            PlanOption("A100-80GB", ParallelPlan(dp=4), 1, 1.0, 2_600.0))
    config = HasConfig(restart_floor_s=10.0, min_gain_s=100.0, launch_overhead_s=0.0)

    def moves(**view) -> list[str]:
        # half done at t = 5000: 5000 s left as it is, 1300 s + restart on 4 GPUs
        run = RunningJob("a", menu[0], (("n1", (0,)),), 0.0, 10_000.0, menu, **view)
        cluster = ClusterView({"n1": NodeState("n1", "A100-80GB", 8, list(range(1, 8)))})
        return [p.kind for p in HasPolicy(config).schedule([], cluster, 5000.0, [run])]

    assert moves() == ["resize"]  # saves on request: nothing lost
    assert moves(saves_on_request=False, last_checkpoint_s=4900.0) == ["resize"]  # 100 s lost
    assert moves(saves_on_request=False) == []  # never checkpointed: 5000 s lost, no gain left


def running_job(job_id: str, gpu_type: str, node: str, gpus: tuple[int, ...],
                menu: dict[int, float], now_s: float, left_s: float) -> RunningJob:
    """A job running on `gpus` of `node` with its menu {GPU count: full-work duration}, `left_s`
    of predicted time left at `now_s` (started at 0, never restarted)."""
    options = tuple(option(gpu_type, n, d) for n, d in sorted(menu.items()))
    current = next(o for o in options if o.num_gpus == len(gpus))
    return RunningJob(job_id, current, ((node, gpus),), 0.0, now_s + left_s, options,
                      1.0, 0.0, 0.0, 0.0, 0.0, 0)


def test_has_admits_a_waiting_job_by_shrinking_the_job_that_loses_least() -> None:
    # A full 8-GPU node: 'linear' scales perfectly (4 GPUs: 10000 s, 2 GPUs: 20000 s), 'flat'
    # barely (4: 10000 s, 2: 12000 s). Both have hours left, so the newcomer (2 GPUs, 1000 s)
    # would wait hours. Over its run, 'flat' on 2 GPUs loses 1060 x (1 - 10/12) = 177 s,
    # 'linear' 530 s (each plus two restarts): 'flat' gives up two GPUs; 'linear' is untouched.
    now_s = 100.0
    cluster = nodes({"a": ("A100-80GB", 8, [])})
    running = [running_job("linear", "A100-80GB", "a", (0, 1, 2, 3), {2: 20000.0, 4: 10000.0},
                           now_s, 9000.0),
               running_job("flat", "A100-80GB", "a", (4, 5, 6, 7), {2: 12000.0, 4: 10000.0},
                           now_s, 9000.0)]
    queue = [job("new", now_s, option("A100-80GB", 2, 1000.0))]
    actions = HasPolicy().schedule(queue, cluster, now_s, running)
    by_job = {a.job_id: a for a in actions}
    assert set(by_job) == {"flat", "new"}
    shrink, place = by_job["flat"], by_job["new"]
    assert shrink.kind == "resize" and shrink.option.num_gpus == 2
    assert set(shrink.assignments[0][1]) < {4, 5, 6, 7}  # in place: a subset of its own GPUs
    freed = {4, 5, 6, 7} - set(shrink.assignments[0][1])
    assert place.kind == "place" and set(place.assignments[0][1]) == freed
    assert "shrinking" in place.decision.reason and place.decision.alternatives


def test_has_shrinks_no_job_moved_within_the_reshape_interval() -> None:
    """The scenario above, with 'flat' (the cheaper victim) restarted 300 s ago: live, the
    scheduler's veto refuses to reshape a job moved less than the orchestrator's interval ago
    (reshapable.reshape_veto), so has must not plan it either; 'linear' gives up its GPUs
    instead. Once the interval has passed, 'flat' is the victim again."""
    now_s = 1000.0
    interval_s = HasConfig().reshape_interval_s

    def victims(restarted_s_ago: float) -> set[str]:
        cluster = nodes({"a": ("A100-80GB", 8, [])})
        flat = running_job("flat", "A100-80GB", "a", (4, 5, 6, 7), {2: 12000.0, 4: 10000.0},
                           now_s, 9000.0)
        running = [running_job("linear", "A100-80GB", "a", (0, 1, 2, 3),
                               {2: 20000.0, 4: 10000.0}, now_s, 9000.0),
                   replace(flat, restarts=1, start_time_s=now_s - restarted_s_ago)]
        queue = [job("new", now_s, option("A100-80GB", 2, 1000.0))]
        return {a.job_id for a in HasPolicy().schedule(queue, cluster, now_s, running)
                if a.kind == "resize"}

    assert victims(interval_s / 2) == {"linear"}
    assert victims(interval_s + 1) == {"flat"}


def test_has_does_not_shrink_when_the_gain_is_below_the_threshold() -> None:
    # The same node, but both running jobs end in 200 s: waiting costs the newcomer 200 s,
    # less than two restarts of any victim, so nothing moves (hysteresis: no losing move).
    now_s = 100.0
    cluster = nodes({"a": ("A100-80GB", 8, [])})
    running = [running_job(name, "A100-80GB", "a", gpus, {2: 20000.0, 4: 10000.0}, now_s, 200.0)
               for name, gpus in (("x", (0, 1, 2, 3)), ("y", (4, 5, 6, 7)))]
    queue = [job("new", now_s, option("A100-80GB", 2, 1000.0))]
    assert HasPolicy().schedule(queue, cluster, now_s, running) == []


def wide_and_ending(now_s: float) -> tuple[ClusterView, list[RunningJob]]:
    """Node 'a' held by 'wide' (8 GPUs, 9000 s left; 4 GPUs would take twice as long), node
    'b' by four 2-GPU jobs that cannot shrink and end in 350 s."""
    cluster = nodes({"a": ("A100-80GB", 8, []), "b": ("A100-80GB", 8, [])})
    running = [running_job("wide", "A100-80GB", "a", tuple(range(8)), {4: 20000.0, 8: 10000.0},
                           now_s, 9000.0)]
    running += [running_job(f"s{i}", "A100-80GB", "b", (2 * i, 2 * i + 1), {2: 1000.0}, now_s,
                            350.0) for i in range(4)]
    return cluster, running


def test_has_admits_waiting_jobs_together_when_none_pays_alone() -> None:
    # Node 'a' is held by 'wide' (8 GPUs, 9000 s left; 4 GPUs would take twice as long), node
    # 'b' by four 2-GPU jobs that cannot shrink and end in 350 s. Four newcomers of 100 s on
    # 2 GPUs each would wait those 350 s. Alone, none is admitted: shrinking 'wide' costs it
    # two restarts (2 x 180 s) and more, over 350 s of saving. Together, two newcomers save
    # 700 s for one shrink of 'wide' to 4 GPUs (about 410 s, x 1.3 for the margin), so both
    # start on the 4 GPUs it gives up; four would need 8, more than it can give.
    now_s = 100.0
    cluster, running = wide_and_ending(now_s)
    queue = [job(f"j{i}", now_s, option("A100-80GB", 2, 100.0)) for i in range(4)]

    def actions(config: HasConfig) -> dict[str, Placement]:
        return {a.job_id: a for a in HasPolicy(config).schedule(queue, cluster, now_s, running)}

    assert actions(HasConfig(admit_together=False)) == {}
    by_job = actions(HasConfig())
    assert set(by_job) == {"wide", "j0", "j1"}
    shrink = by_job["wide"]
    assert shrink.kind == "resize" and shrink.option.num_gpus == 4
    freed = set(range(8)) - set(shrink.assignments[0][1])
    placed = {g for name in ("j0", "j1") for g in by_job[name].assignments[0][1]}
    assert placed == freed and all(by_job[n].kind == "place" for n in ("j0", "j1"))
    assert "together" in by_job["j0"].decision.reason


def test_has_admission_keeps_the_order_on_a_type_a_job_ahead_waits_for() -> None:
    """EASY backfill's rule for admission (`HasConfig.admit_in_order`). 'ahead' (8 GPUs,
    first in line) cannot be admitted: 'v' cannot shrink and 'w' frees only 4 GPUs. It waits
    for v's release (600 s from now) and claims the type. 'behind' (4 GPUs, later in line)
    would wait behind that claim for hours, so shrinking 'w' pays for it alone. In order, and
    'ahead' the shorter job, it is admitted only if it ends within ahead's wait (then the
    GPUs it holds are back by then). Unchecked, such admissions kept a 217 s job in line for
    2,905 s in the benchmark while about 40 jobs behind it were admitted on its type
    (docs/has-experiments.md, s33)."""
    now_s = 40_000.0

    def acted(config: HasConfig, behind_s: float, ahead_s: float = 100.0
              ) -> set[tuple[str, str]]:
        cluster = nodes({"a": ("A100-80GB", 8, []), "b": ("A100-80GB", 8, [])})
        running = [running_job("v", "A100-80GB", "a", tuple(range(8)), {8: 1000.0}, now_s,
                               600.0),
                   running_job("w", "A100-80GB", "b", tuple(range(8)),
                               {4: 20000.0, 8: 10000.0}, now_s, 9000.0)]
        queue = [job("ahead", 0.0, option("A100-80GB", 8, ahead_s)),
                 job("behind", now_s, option("A100-80GB", 4, behind_s))]
        return {(a.job_id, a.kind)
                for a in HasPolicy(config).schedule(queue, cluster, now_s, running)}

    in_order = HasConfig(admit_in_order=True)
    admitted = {("w", "resize"), ("behind", "place")}
    assert acted(in_order, 500.0) == admitted  # 500 s + launch: within the 600 s
    assert acted(HasConfig(admit_in_order=False), 1000.0) == admitted
    assert acted(in_order, 1000.0) == set()  # it would run past ahead's wait
    # A longer job ahead (5,000 s, first in line by aging) does not bar a shorter one
    assert acted(in_order, 1000.0, ahead_s=5000.0) == admitted


def test_has_admits_no_group_past_the_wait_of_a_job_ahead() -> None:
    """`admit_in_order` for admission together: node 'a' is held by 'wide' (8 GPUs, hours
    left, 4 GPUs at half speed), node 'b' by four 2-GPU jobs ending in 350 s. 'ahead'
    (8 GPUs, first in line) waits for b's releases. Four jobs of 400 s on 2 GPUs, behind it,
    would each wait for hours; on the 4 GPUs that shrinking 'wide' frees they would run past
    ahead's wait, so in order neither one of them nor a group is admitted (left out of
    every group it cannot join, 'ahead' bars the jobs behind it there)."""
    now_s = 100.0
    cluster, running = wide_and_ending(now_s)
    queue = [job("ahead", 0.0, option("A100-80GB", 8, 100.0))]
    queue += [job(f"j{i}", now_s, option("A100-80GB", 2, 400.0)) for i in range(4)]

    def acted(config: HasConfig) -> set[str]:
        return {a.job_id for a in HasPolicy(config).schedule(queue, cluster, now_s, running)}

    assert "wide" in acted(HasConfig(admit_in_order=False))
    assert acted(HasConfig(admit_in_order=True)) == set()


def test_has_admits_a_waiting_job_by_displacing_a_running_one_to_idle_slower_gpus() -> None:
    # An A100 node is full with 'long' (4 GPUs, 9000 s left, nothing narrower to shrink to);
    # a 3090 node is idle. The newcomer runs 1000 s on the A100s and 20000 s on the 3090s,
    # so it would wait 9000 s. Displacing 'long' to the 3090s (12000 s for all its work: 1.2x
    # slower) costs it 1800 s to its end plus two restarts, far less than the newcomer's
    # 9000 s: it migrates, and the newcomer takes its A100s. If the 3090s were 3x slower for
    # 'long', it still moves: it keeps a place in line for the A100s and moves back at its
    # turn (`displaced_return`), so its loss is its slowdown over the newcomer's run (1060 s
    # x 2/3, about 707 s) plus two restarts (360 s), as a shrunk job's, not 18000 s to its
    # end. Counted to its end (`displaced_return=False`, the rule before s32), nothing moves:
    # the newcomer starts on the 3090s as a stopgap and keeps its place in line for the A100s
    # (`keep_place`: the 450 s of A100 work it does meanwhile beat the 180 s move); without
    # a kept place (and so no return for a displaced job either) it holds.
    now_s = 1000.0

    def actions(slow_s: float, *more: QueuedJob,
                config: HasConfig = HasConfig()) -> dict[str, tuple[str, str]]:
        cluster = nodes({"a": ("A100-80GB", 4, []), "r": ("RTX-3090", 4, [0, 1, 2, 3])})
        menu = (option("A100-80GB", 4, 10_000.0), option("RTX-3090", 4, slow_s))
        running = [RunningJob("long", menu[0], (("a", (0, 1, 2, 3)),), 0.0, now_s + 9000.0,
                              menu)]
        queue = [job("new", now_s, option("A100-80GB", 4, 1000.0),
                     option("RTX-3090", 4, 20_000.0)), *more]
        return {a.job_id: (a.kind, a.option.gpu_type)
                for a in HasPolicy(config).schedule(queue, cluster, now_s, running)}

    assert actions(12_000.0) == {"long": ("migrate", "RTX-3090"), "new": ("place", "A100-80GB")}
    assert actions(30_000.0) == {"long": ("migrate", "RTX-3090"), "new": ("place", "A100-80GB")}
    assert actions(30_000.0, config=HasConfig(displaced_return=False)) == {
        "new": ("place", "RTX-3090")}
    assert actions(30_000.0, config=HasConfig(keep_place=False)) == {}
    # Under queue pressure (a second job wants the 3090s too: 8 GPUs asked, 4 free) the
    # pass takes the idle GPUs, so nobody is displaced onto them; the 3090 job starts there.
    assert actions(12_000.0, job("other", now_s, option("RTX-3090", 4, 3000.0))) == {
        "other": ("place", "RTX-3090")}
    assert HasPolicy(HasConfig(displace=False)).schedule(
        [job("new", now_s, option("A100-80GB", 4, 1000.0))],
        nodes({"a": ("A100-80GB", 4, []), "r": ("RTX-3090", 4, [0, 1, 2, 3])}), now_s,
        [RunningJob("long", option("A100-80GB", 4, 10_000.0), (("a", (0, 1, 2, 3)),), 0.0,
                    now_s + 9000.0, (option("A100-80GB", 4, 10_000.0),
                                     option("RTX-3090", 4, 12_000.0)))]) == []


@st.composite
def busy_scenarios(draw: st.DrawFn) -> tuple[list[QueuedJob], ClusterView, list[RunningJob]]:
    """Full or nearly full nodes held by elastic running jobs, and a queue of newcomers."""
    spec, running = {}, []
    for i in range(draw(st.integers(1, 4))):
        gpu_type = draw(st.sampled_from(sorted(TYPES)))
        total = draw(st.sampled_from([4, 8]))
        cursor = 0
        for k in range(draw(st.integers(1, 3))):
            width = draw(st.sampled_from([1, 2, 4]))
            if cursor + width > total:
                break
            menu = {n: draw(st.floats(1e3, 1e5)) * TYPES[gpu_type] / n ** draw(st.floats(0.2, 1.0))
                    for n in (1, 2, 4) if n <= width or draw(st.booleans())}
            menu.setdefault(width, 5e4)
            running.append(running_job(f"r{i}{k}", gpu_type, f"n{i}",
                                       tuple(range(cursor, cursor + width)), menu,
                                       100.0, draw(st.floats(10.0, 1e5))))
            cursor += width
        spec[f"n{i}"] = (gpu_type, total, list(range(cursor, total)))
    queue = []
    for j in range(draw(st.integers(1, 6))):
        count = draw(st.sampled_from([1, 2, 4]))
        chosen = draw(st.sets(st.sampled_from(sorted(TYPES)), min_size=1))
        queue.append(job(f"j{j}", draw(st.floats(0.0, 100.0)),
                         *(option(t, count, draw(st.floats(10.0, 1e4)) * TYPES[t]) for t in sorted(chosen))))
    return queue, nodes(spec), running


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_scenarios())
def test_admission_by_shrinking_never_double_books(scenario) -> None:
    """Executed as the engine does (every reshape's release, then every take), has's answer
    with shrinks and admissions never takes a busy GPU or splits a job across types, a job
    shrunk to admit another keeps a subset of its own GPUs, and no job is acted on twice."""
    queue, cluster, running = scenario
    actions = HasPolicy().schedule(queue, cluster, 100.0, running)
    assert len({a.job_id for a in actions}) == len(actions)
    view = cluster.copy()
    by_id = {r.job_id: r for r in running}
    for action in actions:
        if action.kind != "place":
            view.give_back(by_id[action.job_id].assignments)
    for action in actions:
        if action.kind == "preempt":
            continue
        if action.decision is not None and action.decision.reason.startswith("shrunk to admit"):
            own = {(n, g) for n, gs in by_id[action.job_id].assignments for g in gs}
            assert {(n, g) for n, gs in action.assignments for g in gs} < own
        facts = {n: NodeFacts(view.nodes[n].gpu_type, set(view.nodes[n].free_gpus))
                 for n, _ in action.assignments}
        assert not placement_problem(action.option.gpu_type, action.option.num_gpus,
                                     action.option.plan.tp, action.assignments, facts)
        view.take(action.assignments)  # raises on a double booking


def test_has_grows_the_job_that_saves_most_per_gpu_added() -> None:
    # Two idle GPUs next to two 2-GPU jobs that could each grow to 4. 'flat' has more work left
    # (20000 s -> 13000 s: 3440 s saved per GPU, after a 180 s restart), 'scales' saves more
    # per GPU (15000 s -> 7500 s: 3660 s per GPU). The idle GPUs go to 'scales'; ordering by
    # work left (the earlier rule, `grow_per_gpu=False`) would give them to 'flat'.
    now_s = 100.0
    cluster = nodes({"a": ("A100-80GB", 8, [6, 7])})
    running = [running_job("flat", "A100-80GB", "a", (0, 1), {2: 20100.0, 4: 13000.0}, now_s, 20000.0),
               running_job("scales", "A100-80GB", "a", (2, 3), {2: 15100.0, 4: 7550.0}, now_s, 15000.0),
               RunningJob("other", option("A100-80GB", 2, 1e5), (("a", (4, 5)),), 0.0, 1e5)]
    [grown] = HasPolicy().schedule([], cluster, now_s, running)
    assert (grown.job_id, grown.kind, grown.option.num_gpus) == ("scales", "resize", 4)
    [grown] = HasPolicy(HasConfig(grow_per_gpu=False)).schedule([], cluster, now_s, running)
    assert grown.job_id == "flat"


def test_has_bounds_growths_gpu_time_against_the_cheapest_option_on_the_same_type() -> None:
    # 'j' runs on one A100 (40,000 s for all its work); its fastest option, two A100s, has no
    # room ('other' holds the second), and eight V100s sit idle. The 8-V100 option takes
    # 20,000 s on 160,000 GPU-seconds, over 4x its 2-A100 option's 38,000, so the old rule
    # (the cheapest on any type, `grow_cost_per_type=False`) forbids it at any efficiency. On
    # the V100s it scales at 62.5 % (1 V100: 100,000 GPU-seconds), within `grow_cost_limit`
    # 2x, and it halves the job's time: has migrates it.
    now_s = 100.0
    cluster = nodes({"a": ("A100-80GB", 2, []), "v": ("V100-32GB", 8, list(range(8)))})
    options = (option("A100-80GB", 1, 40_000.0), option("A100-80GB", 2, 19_000.0),
               option("V100-32GB", 1, 100_000.0), option("V100-32GB", 8, 20_000.0))
    running = [RunningJob("j", options[0], (("a", (0,)),), 0.0, 40_000.0, options),
               RunningJob("other", option("A100-80GB", 1, 1e6), (("a", (1,)),), 0.0, 1e6)]
    [moved] = HasPolicy().schedule([], cluster, now_s, running)
    assert (moved.job_id, moved.kind, moved.option.gpu_type, moved.option.num_gpus) == \
        ("j", "migrate", "V100-32GB", 8)
    assert HasPolicy(HasConfig(grow_cost_per_type=False)).schedule([], cluster, now_s,
                                                                   running) == []


def test_has_grows_a_restarted_job_after_the_orchestrators_reshape_interval() -> None:
    # has's hysteresis is the system's (ServiceSettings.reshape_min_interval_s, 600 s: the
    # orchestrator refuses a second reshape sooner), not a longer one of its own: a job restarted
    # 900 s ago (2 GPUs, 15000 s left; 4 GPUs would take 7500 s) grows into two idle GPUs.
    # With the earlier 1800 s it would wait, idle GPUs beside it (docs/has-experiments.md, jct8).
    from frenzy.config import ServiceSettings
    assert HasConfig().reshape_interval_s == ServiceSettings.model_fields[
        "reshape_min_interval_s"].default
    now_s = 1000.0
    cluster = nodes({"a": ("A100-80GB", 4, [2, 3])})
    base = running_job("moved", "A100-80GB", "a", (0, 1), {2: 15100.0, 4: 7550.0}, now_s, 15000.0)
    moved = RunningJob(base.job_id, base.option, base.assignments, now_s - 900.0,
                       base.expected_end_s, base.options, restarts=1)
    [grown] = HasPolicy().schedule([], cluster, now_s, [moved])
    assert (grown.job_id, grown.kind, grown.option.num_gpus) == ("moved", "resize", 4)
    assert HasPolicy(HasConfig(reshape_interval_s=1800.0)).schedule([], cluster, now_s, [moved]) == []


def _a100_busy_until(end_s: float) -> list[RunningJob]:
    return [RunningJob("r", option("A100-80GB", 8, 100.0), (("a", tuple(range(8))),), 0.0, end_s)]


def test_has_starts_now_on_slower_gpus_only_at_even_odds() -> None:
    # Without a place kept in line (`keep_place=False`). The whole-trace regression
    # (docs/has.md): start-now put long jobs on GPUs many times slower, betting on a move to
    # the fast ones that a busy cluster never made. The A100 frees in 2,000 s. A job 8x
    # slower on the free T4 (80,000 s against 10,000) would gain at most 70 s from the bet and
    # lose 68,000 s without the move: it holds. A job 1.3x slower (13,000 s) gains up to
    # 1,743 s and loses at most 500 s: it starts now on the T4.
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [])})
    running = _a100_busy_until(2010.0)
    config = HasConfig(launch_overhead_s=0, keep_place=False)
    long_job = [job("x", 0, option("T4", 1, 80_000.0), option("A100-80GB", 1, 10_000.0))]
    assert HasPolicy(config).schedule(long_job, cluster, 10.0, running) == []
    close = [job("x", 0, option("T4", 1, 13_000.0), option("A100-80GB", 1, 10_000.0))]
    placed = HasPolicy(config).schedule(close, cluster, 10.0, running)
    assert [(p.job_id, p.option.gpu_type) for p in placed] == [("x", "T4")]


def test_with_a_place_in_line_a_start_on_slower_gpus_needs_only_to_pay_for_its_move() -> None:
    # The jobs of the test above with `keep_place` (the default): the move comes at the job's
    # turn, so the start on the T4 is no bet, and pays when the work done there while waiting
    # saves more on the A100 than the move costs (`_stopgap_pays`; the move is the 120 s
    # restore and a 60 s launch here). The 8x slower job does 2,000 / 80,000 of its work in
    # the 2,000 s wait, which saves 250 s on the A100: more than 180 s, it starts. A job 40x
    # slower saves 50 s: it holds.
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [])})
    running = _a100_busy_until(2010.0)
    config = HasConfig(launch_overhead_s=60.0)
    slow = [job("x", 0, option("T4", 1, 80_000.0), option("A100-80GB", 1, 10_000.0))]
    assert [(p.job_id, p.option.gpu_type) for p in
            HasPolicy(config).schedule(slow, cluster, 10.0, running)] == [("x", "T4")]
    slower = [job("x", 0, option("T4", 1, 400_000.0), option("A100-80GB", 1, 10_000.0))]
    assert HasPolicy(config).schedule(slower, cluster, 10.0, running) == []


def _on_t4_wanting_a100(start_s: float, now_s: float, submit_s: float) -> RunningJob:
    """'r' runs on 4 T4s (40,000 s for all its work; submitted at `submit_s`, started at
    `start_s`, 10 % done at `now_s`); on 2 A100s it would take 8,000 s for all its work."""
    menu = (option("T4", 4, 40_000.0), option("A100-80GB", 2, 8_000.0))
    span_s = (now_s - start_s) / 0.1
    return RunningJob("r", menu[0], (("t", (0, 1, 2, 3)),), start_s, start_s + span_s, menu,
                      submit_time_s=submit_s)


def test_a_running_job_on_slower_gpus_keeps_its_place_in_line_and_migrates_at_its_turn() -> None:
    # Two A100s free up. 'r' (above) has 36,000 s left on the T4s, 7,200 s on the A100s: it
    # is in line for them, by its work left (7,260 s with the launch), ahead of 'q', which
    # arrives now and needs 20,000 s on them. At its turn the A100s are free and the move
    # gains far more than the thresholds: it migrates, and 'q' waits for the next release.
    # Without a place kept in line, 'q' takes the A100s and 'r' runs on the T4s to its end.
    now_s = 4000.0
    cluster = nodes({"a": ("A100-80GB", 4, [0, 1]), "t": ("T4", 4, [])})
    running = [_on_t4_wanting_a100(0.0, now_s, 0.0),
               RunningJob("busy", option("A100-80GB", 2, 1e5), (("a", (2, 3)),), 0.0, 1e5)]
    queue = [job("q", now_s, option("A100-80GB", 2, 20_000.0))]
    [move] = HasPolicy().schedule(queue, cluster, now_s, running)
    assert (move.job_id, move.kind, move.option.gpu_type, move.option.num_gpus) == \
        ("r", "migrate", "A100-80GB", 2)
    assert move.option.duration_s == 8_000.0  # the full-work option of its menu, as growth's
    assert "its turn" in move.decision.reason
    [placed] = HasPolicy(HasConfig(keep_place=False)).schedule(queue, cluster, now_s, running)
    assert (placed.job_id, placed.kind) == ("q", "place")


def test_a_running_job_earns_no_aging_in_line() -> None:
    # The same two jobs, later: 'q' has waited 80,000 s, and 'r' waited 80,000 s before it
    # started. 'q''s key (20,060 s less 0.2 x 80,000 s of aging) beats 'r''s (7,260 s, with
    # no aging for its time in line: a running job is not starving; with it, 'r' would go
    # first). 'q' takes the A100s: under sustained load the waiting jobs go first
    # (docs/has-experiments.md, s16).
    now_s = 84_000.0
    cluster = nodes({"a": ("A100-80GB", 4, [0, 1]), "t": ("T4", 4, [])})
    running = [_on_t4_wanting_a100(80_000.0, now_s, 0.0),
               RunningJob("busy", option("A100-80GB", 2, 1e6), (("a", (2, 3)),), 0.0, 1e6)]
    queue = [job("q", 4000.0, option("A100-80GB", 2, 20_000.0))]
    [placed] = HasPolicy().schedule(queue, cluster, now_s, running)
    assert (placed.job_id, placed.kind) == ("q", "place")


def test_has_does_not_start_now_under_queue_pressure() -> None:
    # The same even-odds job, but a queue that wants more GPUs than are free: the A100 that
    # frees will go to the queue, not to a move, so start-now's bet does not apply and the
    # plain rule (hold: 2,000 s + 10,000 s beats 13,000 s on the T4 at the GPU-time weight) decides.
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [])})
    queue = [job("x", 0, option("T4", 1, 13_000.0), option("A100-80GB", 1, 10_000.0)),
             job("y", 0, option("A100-80GB", 8, 50_000.0))]
    placed = HasPolicy(HasConfig(launch_overhead_s=0)).schedule(
        queue, cluster, 10.0, _a100_busy_until(2010.0))
    assert [p.job_id for p in placed if p.kind == "place"] == []


def test_has_does_not_bet_on_a_move_to_gpus_that_jobs_ahead_wait_for() -> None:
    # Without a place kept in line. The even-odds job of the test above, behind a shorter
    # job that holds for the A100 (its T4 option is far slower): the A100 that frees goes to
    # that job first, so no bet. (With a place in line, the job's wait counts that claim.)
    cluster = nodes({"t": ("T4", 4, [0, 1, 2, 3]), "a": ("A100-80GB", 8, [])})
    queue = [job("ahead", 0, option("T4", 4, 90_000.0), option("A100-80GB", 1, 5_000.0)),
             job("x", 0, option("T4", 1, 13_000.0), option("A100-80GB", 1, 10_000.0))]
    placed = HasPolicy(HasConfig(launch_overhead_s=0, keep_place=False)).schedule(
        queue, cluster, 10.0, _a100_busy_until(2010.0))
    assert [p.job_id for p in placed if p.kind == "place"] == []


def test_has_gives_a_burst_its_fair_shares_instead_of_the_first_job_the_whole_type() -> None:
    """Worked by hand: 8 free A100s, two jobs, each 100 s on 8, 200 s on 4, 400 s on 2. Alone,
    each would take all 8 (earliest completion); the second would then wait or start on the
    T4s. With the fair share (8 GPUs over 2 jobs wanting them) both start at once on 4."""
    cluster = nodes({"a": ("A100-80GB", 8, list(range(8))), "t": ("T4", 8, list(range(8)))})
    menu = (option("A100-80GB", 8, 100.0), option("A100-80GB", 4, 200.0),
            option("A100-80GB", 2, 400.0), option("T4", 8, 4000.0))
    queue = [job("j0", 0, *menu), job("j1", 1, *menu)]
    shared = HasPolicy().schedule(queue, cluster, 10.0)
    assert [(p.job_id, p.option.gpu_type, p.option.num_gpus) for p in shared] == \
        [("j0", "A100-80GB", 4), ("j1", "A100-80GB", 4)]
    # The record says why the 8-GPU option lost
    assert any(a.option.num_gpus == 8 and "fair share of A100-80GB (4 GPUs)" in a.verdict
               for a in shared[0].decision.alternatives)
    # The control: without it, j0 takes the whole type and j1 starts 40x slower on the T4s
    alone = HasPolicy(HasConfig(fair_share=False)).schedule(queue, cluster, 10.0)
    assert [(p.job_id, p.option.gpu_type, p.option.num_gpus) for p in alone] == \
        [("j0", "A100-80GB", 8), ("j1", "T4", 8)]


def test_has_fair_share_counts_running_jobs_and_never_caps_a_jobs_narrowest_option() -> None:
    """3 jobs run on the 12 A100s' first 8 and one is queued: a share of 12 / 4 = 3 GPUs. The
    queued job's options are 4 and 2 GPUs: it takes 2, not the 4 that are free. A job whose
    narrowest option is 4 still starts on 4, and so does an urgent deadline job's 4."""
    busy = option("A100-80GB", 2, 1e5)
    running = [RunningJob(f"r{i}", busy, (("a", (2 * i, 2 * i + 1)),), 0.0, 1e5) for i in range(3)]
    cluster = nodes({"a": ("A100-80GB", 12, list(range(6, 12)))})
    flexible = job("x", 0, option("A100-80GB", 4, 100.0), option("A100-80GB", 2, 200.0))
    [placed] = HasPolicy().schedule([flexible], cluster, 10.0, running)
    assert placed.option.num_gpus == 2
    rigid = job("y", 0, option("A100-80GB", 4, 100.0))
    assert [p.option.num_gpus for p in HasPolicy().schedule([rigid], cluster, 10.0, running)] == [4]
    urgent = job("d", 0, option("A100-80GB", 4, 100.0), option("A100-80GB", 2, 200.0),
                 deadline_s=250.0)
    assert [p.option.num_gpus for p in HasPolicy().schedule([urgent], cluster, 10.0, running)] == [4]


def test_fair_shares_divide_a_type_among_the_jobs_that_want_it_while_each_can_have_some() -> None:
    from frenzy_scheduler.policies.has import fair_shares
    capacity = {"A100-80GB": 16, "T4": 8, "V100-32GB": 4}
    running = {"A100-80GB": 2, "V100-32GB": 3}
    queued = {"A100-80GB": 2, "T4": 9, "V100-32GB": 1}
    # A100: 16 over 4 jobs; T4: 9 want 8 GPUs, so no cap; V100: 4 over 4
    assert fair_shares(running, queued, capacity) == {"A100-80GB": 4, "T4": 8, "V100-32GB": 1}
    assert fair_shares({}, {}, {"T4": 8}) == {"T4": 8}  # nobody wants it: no cap


def test_has_fair_share_caps_only_the_type_a_job_wants_and_not_when_too_many_want_it() -> None:
    """With 9 jobs wanting 8 A100s, no share: the first takes its fastest, all 8. And a job's
    slower type is not capped: with the A100s held by a long job, a job whose fastest option is
    on A100s starts on all 6 free T4s."""
    a100, t4 = "A100-80GB", "T4"
    cluster = nodes({"a": (a100, 8, list(range(8))), "t": (t4, 8, list(range(8)))})
    menu = (option(a100, 8, 100.0), option(a100, 4, 200.0), option(a100, 1, 800.0))
    crowd = [job(f"j{i}", i, *menu) for i in range(9)]
    placed = HasPolicy().schedule(crowd, cluster, 10.0)
    assert (placed[0].job_id, placed[0].option.num_gpus) == ("j0", 8)
    # r holds the A100s for long; two jobs run on one T4 each (a T4 share of 8 / 2 = 4, were
    # T4 the type x wants)
    running = [RunningJob("r", option(a100, 8, 1e6), (("a", tuple(range(8))),), 0.0, 1e6)] + \
        [RunningJob(f"t{i}", option(t4, 1, 1e6), (("t", (i,)),), 0.0, 1e6) for i in range(2)]
    full = nodes({"a": (a100, 8, []), "t": (t4, 8, list(range(2, 8)))})
    spill = job("x", 0, option(a100, 8, 100.0), option(a100, 1, 800.0), option(t4, 6, 400.0),
                option(t4, 2, 1600.0))
    [started] = HasPolicy().schedule([spill], full, 10.0, running)
    assert (started.option.gpu_type, started.option.num_gpus) == (t4, 6)
