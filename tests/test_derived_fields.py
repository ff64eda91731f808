"""Fields derived at construction (`PlanOption.num_gpus`; `RunningJob.estimated_end_s`,
`progress`, `num_gpus`): the values the cached properties they replace gave, derived again by
`dataclasses.replace`, and left out of equality, hashing and repr."""
from __future__ import annotations

import math
from dataclasses import replace

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.core import RunningJob


def option(dp: int = 4, tp: int = 2, duration_s: float = 100.0) -> PlanOption:
    return PlanOption("A100-80GB", ParallelPlan(dp=dp, tp=tp), 1, 1.0, duration_s)


def test_an_options_gpu_count_follows_its_plan_and_stays_out_of_equality() -> None:
    first = option()
    assert first.num_gpus == 8 == first.plan.num_gpus
    assert replace(first, plan=ParallelPlan(dp=2, pp=3)).num_gpus == 6
    assert replace(first, duration_s=5.0).num_gpus == 8
    assert first == option() and hash(first) == hash(option())
    assert "num_gpus" not in repr(first)


def test_a_running_jobs_derived_fields_match_their_formulas_and_follow_replace() -> None:
    nodes = (("n0", (0, 1, 2, 3)), ("n1", (0, 1)))
    predicted = RunningJob("j", option(), nodes, start_time_s=100.0, expected_end_s=1100.0,
                           fraction_at_start=0.5, restoring_until_s=160.0)
    assert predicted.num_gpus == 6
    assert predicted.estimated_end_s == 1100.0  # no measured rate: the predicted end
    assert predicted.progress == (160.0, 0.5 / (1100.0 - 160.0))
    assert math.isclose(predicted.remaining_fraction(630.0), 0.25)
    measured = replace(predicted, fraction_per_s=0.001)
    assert measured.estimated_end_s == 160.0 + 0.5 / 0.001
    assert measured.progress == (160.0, 0.001)
    assert replace(predicted, assignments=nodes[:1]).num_gpus == 4
    instant = RunningJob("k", option(), nodes, 50.0, 50.0)  # no span, no rate
    assert instant.progress == (50.0, math.inf) and instant.remaining_fraction(60.0) == 0.0
    assert predicted == replace(predicted) and "progress" not in repr(predicted)
