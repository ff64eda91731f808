"""The predictor's memory-error record: pure maths (error_table) and the faust app's settings."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from frenzy.v1 import events_pb2, types_pb2
from frenzy_predictor import error_table
from frenzy_predictor.error_table import Measurement

GIB = 1 << 30


def status(job_id: str = "j1", state: int = types_pb2.SUCCEEDED, reason: str = "all processes exited 0",
           attempt: int = 0, model: str = "gpt2", gpu_type: str = "A100", predicted: int = 11 * GIB,
           measured: int = 10 * GIB, source: int = events_pb2.ORCHESTRATOR) -> events_pb2.JobStatusChanged:
    job = types_pb2.Job(id=job_id, state=state, reason=reason, attempt=attempt,
                        spec=types_pb2.JobSpec(model=model),
                        option=types_pb2.PlanOption(gpu_type=gpu_type, peak_bytes_per_gpu=predicted),
                        progress=types_pb2.Progress(peak_memory_bytes=measured))
    return events_pb2.JobStatusChanged(job_id=job_id, state=state, reason=reason, source=source,
                                       attempt=attempt, progress=job.progress, job=job)


def test_error_is_relative_to_the_measured_peak():
    assert error_table.prediction_error(110, 100) == pytest.approx(0.1)
    assert error_table.prediction_error(80, 100) == pytest.approx(-0.2)
    with pytest.raises(ValueError):
        error_table.prediction_error(100, 0)


def test_success_and_oom_carry_a_measurement():
    m = error_table.measurement_of(status())
    assert m == Measurement("j1", 0, "gpt2", "A100", 11 * GIB, 10 * GIB, "succeeded",
                         family="gpt2")
    assert m.key == "gpt2|A100" and m.measurement_id == "j1#0"
    assert m.error == pytest.approx(0.1)
    oom = error_table.measurement_of(status(state=types_pb2.FAILED, reason="OOM: out of memory",
                                            attempt=2, predicted=8 * GIB))
    assert oom.outcome == "oom" and oom.attempt == 2 and oom.error == pytest.approx(-0.2)


def test_an_oom_the_orchestrator_re_plans_counts_for_the_attempt_that_ran():
    # The orchestrator reports a re-planned OOM as SUBMITTED with the attempt already bumped.
    m = error_table.measurement_of(status(state=types_pb2.SUBMITTED, attempt=1,
                                          reason="OOM on A100 (predicted 1, measured 2 bytes); re-planning"))
    assert m is not None and m.outcome == "oom" and m.attempt == 0


@pytest.mark.parametrize("event", [
    status(source=events_pb2.AGENT),
    status(state=types_pb2.RUNNING, reason="processes started"),
    status(state=types_pb2.FAILED, reason="exit code 1"),
    status(state=types_pb2.CANCELLED, reason="cancelled by user"),
    status(state=types_pb2.SUBMITTED, reason="submitted"),
    status(measured=0),
    status(predicted=0),
    events_pb2.JobStatusChanged(job_id="j1", state=types_pb2.SUCCEEDED, source=events_pb2.ORCHESTRATOR),
], ids=["agent", "running", "failed-not-oom", "cancelled", "submitted", "no-measured", "no-predicted",
        "no-job"])
def test_events_without_a_measured_peak_are_ignored(event):
    assert error_table.measurement_of(event) is None


def test_a_redelivered_measurement_is_counted_once():
    m = error_table.measurement_of(status())
    once, counted = error_table.apply(None, m)
    assert counted and once["jobs"] == 1
    twice, counted = error_table.apply(once, m)
    assert not counted and twice == once
    other_attempt, counted = error_table.apply(once, Measurement(**{**m.to_dict(), "attempt": 1}))
    assert counted and other_attempt["jobs"] == 2


def test_apply_leaves_its_input_alone_and_the_window_is_bounded():
    record = None
    for i in range(10):
        before = json.dumps(record)
        new, _ = error_table.apply(record, Measurement(f"j{i}", 0, "gpt2", "A100", 2, 1, "succeeded"),
                                   window=4)
        assert json.dumps(record) == before
        record = new
    assert record["jobs"] == 10 and record["recent"] == ["j6#0", "j7#0", "j8#0", "j9#0"]


measurements = st.builds(
    Measurement, job_id=st.sampled_from([f"job-{i}" for i in range(12)]),
    attempt=st.integers(0, 2), model=st.sampled_from(["gpt2", "llama2-7b", "cfg|with|bars.json"]),
    gpu_type=st.sampled_from(["A100", "H100"]), predicted_bytes=st.integers(1, 100 * GIB),
    measured_bytes=st.integers(1, 100 * GIB), outcome=st.sampled_from(["succeeded", "oom"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(measurements, max_size=40), st.data())
def test_aggregate_equals_a_reference_over_unique_measurements(ms, data):
    # The table keeps the first delivery of each (job, attempt) per key; any redeliveries
    # interleaved later must change nothing.
    firsts: dict[tuple[str, str], Measurement] = {}
    for m in ms:
        firsts.setdefault((m.key, m.measurement_id), m)
    redelivered = list(ms)
    for m in data.draw(st.lists(st.sampled_from(ms), max_size=10)) if ms else []:
        redelivered.insert(data.draw(st.integers(redelivered.index(m) + 1, len(redelivered))), m)
    records = error_table.aggregate(redelivered)
    assert set(records) == {key for key, _ in firsts}
    for key, record in records.items():
        unique = [m for (k, _), m in firsts.items() if k == key]
        errors = [m.error for m in unique]
        assert record["jobs"] == len(unique)
        assert record["sum_abs_error"] == pytest.approx(sum(abs(e) for e in errors))
        assert record["worst_under_prediction"] == pytest.approx(min([0.0, *errors]))
        assert record["last_job_id"] == unique[-1].job_id
        s = error_table.summary(record)
        assert s["mean_abs_error"] == pytest.approx(sum(abs(e) for e in errors) / len(errors))
        assert "recent" not in s
        assert json.loads(json.dumps(record)) == record  # a faust json value


@given(measurements)
def test_measurement_survives_json(m):
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    assert error_table.split_key(m.key) == (m.model, m.gpu_type)


def test_prometheus_text_parses_with_escaped_labels():
    records = error_table.aggregate([
        Measurement("a", 0, "gpt2", "A100", 110, 100, "succeeded"),
        Measurement("b", 0, "gpt2", "A100", 80, 100, "oom"),
        Measurement("c", 0, 'dir/"odd"\\cfg.json', "H100", 100, 100, "succeeded"),
    ])
    families = {f.name: f for f in text_string_to_metric_families(error_table.prometheus_text(records))}
    samples = {(s.name, s.labels["model"], s.labels["gpu_type"]): s.value
               for f in families.values() for s in f.samples}
    assert samples[("frenzy_predictor_memory_error_jobs", "gpt2", "A100")] == 2
    assert samples[("frenzy_predictor_memory_error_mean_abs_ratio", "gpt2", "A100")] == pytest.approx(0.15)
    assert samples[("frenzy_predictor_memory_error_worst_under_ratio", "gpt2", "A100")] == pytest.approx(-0.2)
    assert samples[("frenzy_predictor_memory_error_jobs", 'dir/"odd"\\cfg.json', "H100")] == 1
    assert all(math.isfinite(v) for v in samples.values())


def test_app_settings_respect_the_namespace_and_the_embedded_broker():
    from faust.types import ProcessingGuarantee

    from frenzy.config import ErrorRecorderSettings
    from frenzy_predictor.error_recorder import create_app

    app = create_app(ErrorRecorderSettings(kafka_bootstrap="127.0.0.1:1", namespace="ns",
                                           errors_data_dir="/tmp/frenzy-error-recorder-unused"))
    assert app.conf.id == "ns.frenzy-error-recorder"
    assert app.conf.processing_guarantee == ProcessingGuarantee.AT_LEAST_ONCE
    assert app.conf.producer_max_batch_size == 1
    assert (app.conf.broker_session_timeout, app.conf.broker_heartbeat_interval) == (6.0, 1.0)
    assert not app.conf.web_enabled
    assert app.error_table.changelog_topic.get_topic_name() == "ns.frenzy-error-recorder-memory-errors-changelog"
    subscribed = {t for agent in app.agents.values() for t in agent.channel.topics}
    assert "ns.frenzy.jobs.status" in subscribed


def test_the_record_compares_the_measured_peak_with_marps_allocated_prediction_not_the_margin():
    """Trainers report max_memory_allocated: the record compares it with peak_allocated_bytes,
    and a learned margin applied to the option never enters the record (it would shrink the next
    margin: a feedback loop)."""
    event = status(predicted=13 * GIB, measured=10 * GIB)
    event.job.option.peak_allocated_bytes = 11 * GIB
    event.job.option.memory_margin = 1.3
    assert error_table.measurement_of(event).predicted_bytes == 11 * GIB
    event.job.option.peak_allocated_bytes = 0  # an option from before the three peaks
    assert error_table.measurement_of(event).predicted_bytes == round(13 * GIB / 1.3)
