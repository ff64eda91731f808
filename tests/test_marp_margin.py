"""The learned safety margin: from measured/predicted peaks in the error record to planning."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy.catalog.models import model_catalog
from frenzy.domain import Recipe
from frenzy.jobspec import JobSpecModel
from frenzy_predictor.memory import estimate_memory
from frenzy_predictor.error_table import (MARGIN_MAX, MARGIN_MIN_SAMPLES, Measurement, aggregate,
                                          learned_margins, margin_key, upper_quantile)
from frenzy_predictor.planner import plan_job

GIB = 1024**3


def m(job: str, ratio: float, model="gpt2", gpu="A100-80GB", framework="frenzy", family="gpt2"):
    predicted = 10 * GIB
    return Measurement(job, 0, model, gpu, predicted, int(predicted * ratio), "succeeded",
                       framework, family)


def test_no_margin_below_the_minimum_sample_count():
    few = aggregate(m(f"j{i}", 1.3) for i in range(MARGIN_MIN_SAMPLES - 1))
    assert learned_margins(few) == {}
    enough = aggregate(m(f"j{i}", 1.3) for i in range(MARGIN_MIN_SAMPLES))
    assert learned_margins(enough) == {margin_key("frenzy", "gpt2", "A100-80GB"): pytest.approx(1.3)}


def test_margin_is_the_upper_quantile_bounded_and_pooled_per_framework_family_gpu():
    ratios = [0.9, 0.95, 1.0, 1.02, 1.05, 1.08, 1.1, 1.12, 1.15, 1.2]
    # two models of one family pool into one key; another framework is a key of its own
    records = aggregate([m(f"a{i}", r, model="gpt2") for i, r in enumerate(ratios[:5])]
                        + [m(f"b{i}", r, model="gpt2-xl") for i, r in enumerate(ratios[5:])]
                        + [m(f"c{i}", 3.0, framework="megatron") for i in range(6)]
                        + [m(f"d{i}", 0.5, gpu="T4") for i in range(6)])
    margins = learned_margins(records)
    assert margins[margin_key("frenzy", "gpt2", "A100-80GB")] == 1.2  # the 95th percentile of 10
    assert margins[margin_key("megatron", "gpt2", "A100-80GB")] == MARGIN_MAX  # bounded above
    assert margins[margin_key("frenzy", "gpt2", "T4")] == 1.0  # over-prediction: no discount


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=50), st.floats(0.5, 1.0))
def test_upper_quantile_covers_at_least_that_fraction(values, q):
    top = upper_quantile(values, q)
    assert top in values
    assert sum(v <= top for v in values) >= q * len(values)


def _spec(framework="frenzy"):
    return JobSpecModel.model_validate({
        "name": "j", "model": "gpt2", "constraints": {"gpu_types": ["A100-80GB", "T4"]},
        "training": {"seq_len": 1024, "global_batch_size": 64, "steps": 10,
                     "framework": framework}}).to_proto()


def test_planning_applies_the_margin_of_the_specs_framework_family_and_gpu_type():
    plain, _ = plan_job(_spec())
    margins = {margin_key("frenzy", "gpt2", "A100-80GB"): 1.25}
    guarded, _ = plan_job(_spec(), margins=margins)
    a100 = [o for o in guarded if o.gpu_type == "A100-80GB"]
    assert a100 and all(o.memory_margin == 1.25 for o in a100)
    for o in a100:  # the peak to fit is the device peak times the margin
        est = estimate_memory(model_catalog()["gpt2"], Recipe(), o.plan, 1024,
                              grad_accum=o.plan.grad_accum(64))
        assert o.peak_bytes_per_gpu == math.ceil(1.25 * est.device_peak_bytes)
        assert (o.peak_allocated_bytes, o.peak_reserved_bytes) == \
            (est.peak_allocated_bytes, est.peak_reserved_bytes)
    # the margin shrinks what fits: the largest A100 micro-batch is no larger than before
    assert max(o.plan.micro_batch for o in a100) <= \
        max(o.plan.micro_batch for o in plain if o.gpu_type == "A100-80GB")
    assert all(o.memory_margin == 1.0 for o in guarded if o.gpu_type == "T4")
    assert all(o.memory_margin == 1.0 for o in plain)
    # another framework's margin does not apply to this spec
    other, _ = plan_job(_spec(), margins={margin_key("megatron", "gpt2", "A100-80GB"): 1.5})
    assert other == plain


def test_cluster_view_reports_the_margins_placed_jobs_run_with():
    from frenzy.tools.cli_jobs import margins_in_use
    from frenzy.v1 import types_pb2

    def job(state, gpu, margin):
        return types_pb2.Job(state=state, option=types_pb2.PlanOption(gpu_type=gpu,
                                                                      memory_margin=margin))

    jobs = [job(types_pb2.RUNNING, "A100-80GB", 1.25), job(types_pb2.PLACED, "A100-80GB", 1.1),
            job(types_pb2.RUNNING, "T4", 0.0), job(types_pb2.SUCCEEDED, "H100-80GB", 1.4)]
    assert margins_in_use(jobs) == {"A100-80GB": (1.25, 2), "T4": (1.0, 0)}
