"""The time bounds that let has skip running jobs without computing their work left
(`elastic.when_left_s`, `elastic.growth_hopeless_from_s`): each is checked against the test
it stands for, computed the long way, on random jobs and times."""
from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_scheduler.core import RunningJob
from frenzy_scheduler.policies.elastic import (Menu, full_duration_s, gain_floor_s,
                                               growth_hopeless_from_s, rounding_margin_s,
                                               when_left_s)
from test_has_early_stop import option


@st.composite
def running_jobs(draw: st.DrawFn) -> RunningJob:
    """A job on a T4 with a menu that may hold faster options: resumed or fresh, restoring or
    not, with a measured progress rate or only its predicted end."""
    start_s = draw(st.floats(0.0, 1e6))
    # 0: no work left at its start (live, a job restarted at its last step)
    fraction = draw(st.sampled_from([1.0, 0.0, draw(st.floats(0.01, 1.0))]))
    span_s = draw(st.floats(1.0, 1e6))
    own = option("T4", draw(st.sampled_from([1, 2])), span_s)
    menu = (own,) + tuple(option(t, n, draw(st.floats(1.0, 2e6)))
                          for t, n in draw(st.lists(st.tuples(st.sampled_from(["A100-80GB",
                                                                               "T4"]),
                                                              st.sampled_from([1, 2, 4])),
                                                    max_size=4)))
    return RunningJob("r", own, (("n", (0,)),), start_s, start_s + span_s, menu,
                      fraction_at_start=fraction,
                      restoring_until_s=draw(st.sampled_from([0.0, start_s + 100.0])),
                      fraction_per_s=draw(st.sampled_from([0.0, draw(st.floats(1e-7, 1e-2))])))


@settings(max_examples=300, deadline=None)
@given(running_jobs(), st.floats(-1e6, 3e6), st.sampled_from([0.0, 1.0]))
def test_the_work_left_from_the_kept_progress_is_the_formula_to_the_last_bit(
        run, offset_s, span_s) -> None:
    """`RunningJob.remaining_fraction` reads its begin and rate from `progress` (kept per
    run): the same floats as the formula written out, before the start too, and for a job
    whose predicted span is empty (no rate: counted as done)."""
    if span_s == 0.0:
        run = replace(run, expected_end_s=max(run.start_time_s, run.restoring_until_s),
                      fraction_per_s=0.0)
    now_s = run.start_time_s + offset_s
    begin_s = max(run.start_time_s, run.restoring_until_s)
    rate = run.fraction_per_s
    if rate <= 0:
        span = run.expected_end_s - begin_s
        rate = run.fraction_at_start / span if span > 0 else math.inf
    done = rate * max(0.0, now_s - begin_s)
    expected = max(0.0, run.fraction_at_start - done) if done < math.inf else 0.0
    assert run.remaining_fraction(now_s) == expected
    assert run.remaining_fraction(now_s) == expected  # the kept progress, read again


@settings(max_examples=300, deadline=None)
@given(running_jobs(), st.floats(0.0, 1.0), st.floats(0.0, 3e6))
def test_the_work_left_reaches_a_fraction_when_predicted(run, share, offset_s) -> None:
    """Before `when_left_s` (less the margin) at least the fraction is left, after it (plus
    the margin) less: fractions up to the job's fraction at its start, as has asks."""
    fraction = share * run.fraction_at_start
    when_s = when_left_s(run, fraction)
    if when_s == -math.inf:  # counted as done: less than the fraction is left at any time
        assert run.remaining_fraction(run.start_time_s + offset_s) < fraction or \
            run.remaining_fraction(run.start_time_s + offset_s) == fraction == 0.0
        return
    if when_s == math.inf:  # the work left never changes
        assert run.remaining_fraction(run.start_time_s + offset_s) >= fraction
        return
    margin_s = rounding_margin_s(when_s)
    assert run.remaining_fraction(when_s - margin_s - offset_s) >= fraction
    if fraction > 0:
        assert run.remaining_fraction(when_s + margin_s + offset_s) < fraction


@settings(max_examples=300, deadline=None)
@given(running_jobs(), st.floats(0.0, 3e6), st.sampled_from([0.1, 0.3, 0.5]),
       st.sampled_from([0.0, 60.0, 600.0]))
def test_growth_first_test_fails_after_its_hopeless_time(run, offset_s, fraction,
                                                         min_gain_s) -> None:
    """Growth's first test, as `elastic.grow` writes it, fails at every time past the bound."""
    menu = Menu(run.options)
    hopeless_s = growth_hopeless_from_s(run, menu, fraction, min_gain_s)
    if hopeless_s == math.inf:  # no claim: growth tests it at every decision
        assert min_gain_s == 0 or full_duration_s(run) <= menu.fastest_s
        return
    now_s = max(hopeless_s, run.start_time_s - 1e3) + offset_s + 1e-3
    left = run.remaining_fraction(now_s)
    current_s = left * full_duration_s(run)
    assert current_s - left * menu.fastest_s < gain_floor_s(current_s, fraction, min_gain_s)
