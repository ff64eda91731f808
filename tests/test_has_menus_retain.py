"""`elastic.Menus.retain` drops the memos of jobs no longer running (so finished and reshaped
jobs' objects do not pile up for the garbage collector to walk); what it keeps, and what is
derived again after, is what a fresh `Menus` derives."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_scheduler.core import RunningJob
from frenzy_scheduler.policies.elastic import Menus
from test_has_early_stop import option

TYPES = ("A100-80GB", "T4")


@st.composite
def menus(draw: st.DrawFn) -> tuple:
    return tuple(option(t, n, draw(st.floats(1e2, 1e5)))
                 for t, n in draw(st.lists(st.tuples(st.sampled_from(TYPES),
                                                     st.sampled_from([1, 2, 4])),
                                           min_size=1, max_size=4, unique=True)))


@st.composite
def histories(draw: st.DrawFn) -> list[list[RunningJob]]:
    """Running sets over time: jobs start (on a menu that may be an earlier job's), are
    reshaped (a new `RunningJob` on the same menu) or end."""
    pool = draw(st.lists(menus(), min_size=1, max_size=8))
    running: list[RunningJob] = []
    steps = []
    for step in range(draw(st.integers(1, 10))):
        kept = [r for r in running if draw(st.booleans())]
        for i in range(draw(st.integers(0, 6))):
            menu = draw(st.sampled_from(pool))
            choice = draw(st.sampled_from(menu))
            kept.append(RunningJob(f"j{step}-{i}", choice, (), 0.0, 1e5, menu,
                                   draw(st.sampled_from([1.0, 0.5])),
                                   deadline_s=draw(st.sampled_from([0.0, 0.0, 5e5]))))
        running = kept
        steps.append(running)
    return steps


def answers(memo: Menus, running: list[RunningJob]) -> list:
    out = []
    for run in running:
        menu = memo.of(run.options)
        out.append((memo.shrink_steps(run), memo.victim(run, False), memo.victim(run, True),
                    menu.entries, menu.cheapest_by_type, menu.fastest_s))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_retained_memos_answer_as_fresh_ones(history: list[list[RunningJob]]) -> None:
    memo = Menus()
    for running in history:
        before = {id(r): memo._shrinks.get(id(r)) for r in running}
        over = max(len(memo._shrinks), len(memo._victims), len(memo._menus)) > 4 * len(running)
        memo.retain(running, slack=0)  # no slack: it prunes past four entries a running job
        live, live_menus = {id(r) for r in running}, {id(r.options) for r in running}
        if over:
            assert set(memo._shrinks) <= live and set(memo._victims) <= live
            assert set(memo._menus) <= live_menus
        for run in running:  # a live job's memo is kept, the same entry
            if before[id(run)] is not None and before[id(run)][0] is run:
                assert memo._shrinks[id(run)] is before[id(run)]
        assert answers(memo, running) == answers(Menus(), running)
