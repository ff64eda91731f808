"""The predictor's record of its own memory error, per model and GPU type (pure; no I/O).

Every job that measures its peak memory (it succeeded, or it ran out of memory) tells us how far
MARP's per-GPU prediction was off: error = (predicted - measured) / measured, negative when MARP
under-predicted (the dangerous side: an under-prediction is an OOM risk). The faust app in
`error_recorder.py` folds these measurements into a table keyed "<model>|<gpu_type>" whose values
are the plain dicts built here.

Delivery is at-least-once, so one measurement can arrive twice. Each value remembers the last
`DEDUPE_WINDOW` measurement ids ("<job id>#<attempt>") and a redelivered one is not counted again.

The record also keeps the last RATIO_WINDOW ratios measured / predicted with the job's training
framework and model family, so that planning can learn a safety margin from it
(`learned_margins`): per (framework, model family, GPU type), an upper quantile of those
ratios, bounded to [1, MARGIN_MAX], once MARGIN_MIN_SAMPLES jobs have been measured.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from frenzy.catalog.models import load_model
from frenzy.outcomes import OOM_REASON
from frenzy.v1 import events_pb2, types_pb2

KEY_SEPARATOR = "|"
RECORDER_APP_NAME = "frenzy-error-recorder"  # the faust app (its id, after the namespace prefix)
TABLE_NAME = "memory-errors"
DEDUPE_WINDOW = 256  # measurement ids remembered per key
RATIO_WINDOW = 256  # measured / predicted ratios remembered per key (the newest)
MARGIN_QUANTILE = 0.95  # the margin covers this fraction of the jobs measured
MARGIN_MIN_SAMPLES = 5  # fewer jobs than this per (framework, family, GPU type): no margin
MARGIN_MAX = 1.5  # a margin never asks for more than this times the prediction


@dataclass(frozen=True)
class Measurement:
    """One attempt's predicted and measured peak memory per GPU."""

    job_id: str
    attempt: int  # the attempt whose peak was measured
    model: str
    gpu_type: str
    predicted_bytes: int
    measured_bytes: int
    outcome: str  # "succeeded" | "oom"
    framework: str = "frenzy"  # the spec's training.framework
    family: str = ""  # the model's family ("llama", "gpt2", "llama-moe"); "" if unresolvable

    @property
    def key(self) -> str:
        return table_key(self.model, self.gpu_type)

    @property
    def measurement_id(self) -> str:
        return f"{self.job_id}#{self.attempt}"

    @property
    def error(self) -> float:
        return prediction_error(self.predicted_bytes, self.measured_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        return cls(job_id=str(data["job_id"]), attempt=int(data["attempt"]),
                   model=str(data["model"]), gpu_type=str(data["gpu_type"]),
                   predicted_bytes=int(data["predicted_bytes"]),
                   measured_bytes=int(data["measured_bytes"]), outcome=str(data["outcome"]),
                   framework=str(data.get("framework") or "frenzy"),
                   family=str(data.get("family") or ""))


def model_family(model: str) -> str:
    """The family a spec's model resolves to ("llama-moe" for a mixture of experts); "" when
    it does not resolve here (a config path only the submitter's machine has)."""
    try:
        arch = load_model(model)
    except ValueError:
        return ""
    return f"{arch.family}-moe" if arch.is_moe else arch.family


def margin_key(framework: str, family: str, gpu_type: str) -> str:
    return KEY_SEPARATOR.join((framework or "frenzy", family, gpu_type))


def changelog_topic(prefix: str) -> str:
    """The compacted topic faust keeps the table in: "<app id>-<table>-changelog"."""
    return f"{prefix}{RECORDER_APP_NAME}-{TABLE_NAME}-changelog"


def table_key(model: str, gpu_type: str) -> str:
    return f"{model}{KEY_SEPARATOR}{gpu_type}"


def split_key(key: str) -> tuple[str, str]:
    """(model, gpu_type); a model given as a path may itself hold the separator, a GPU type not."""
    model, _, gpu_type = key.rpartition(KEY_SEPARATOR)
    return model, gpu_type


def prediction_error(predicted: int, measured: int) -> float:
    """(predicted - measured) / measured: -0.2 means MARP predicted 20% too little."""
    if measured <= 0:
        raise ValueError(f"measured peak must be positive, got {measured}")
    return (predicted - measured) / measured


def predicted_peak_bytes(option: types_pb2.PlanOption) -> int:
    """MARP's prediction of what the job measures: the trainer reports
    torch.cuda.max_memory_allocated (on CPU, its tracked tensors), so peak_allocated_bytes when
    the option carries it; else the device peak without the learned margin (a margin that
    entered the record would shrink the next one: the record must see MARP, not the guard)."""
    if option.peak_allocated_bytes > 0:
        return option.peak_allocated_bytes
    return round(option.peak_bytes_per_gpu / (option.memory_margin or 1.0))


def measurement_of(status: events_pb2.JobStatusChanged) -> Measurement | None:
    """The measurement an orchestrator status event carries, or None if it carries none.

    Counted: SUCCEEDED; FAILED with an OOM reason (no re-plan left); and SUBMITTED with an OOM
    reason, which is how the orchestrator reports an OOM it re-plans. A re-plan has already
    bumped the attempt, so the measured attempt is the one before. Only the orchestrator's events
    count (source ORCHESTRATOR, carrying the full job); agents report per node.
    """
    if status.source != events_pb2.ORCHESTRATOR or not status.HasField("job"):
        return None
    job = status.job
    attempt = status.attempt or job.attempt
    oom = status.reason.startswith(OOM_REASON)
    if status.state == types_pb2.SUCCEEDED:
        outcome = "succeeded"
    elif status.state == types_pb2.FAILED and oom:
        outcome = "oom"
    elif status.state == types_pb2.SUBMITTED and oom:
        outcome, attempt = "oom", max(attempt - 1, 0)
    else:
        return None
    measured = job.progress.peak_memory_bytes or status.progress.peak_memory_bytes
    predicted = predicted_peak_bytes(job.option)
    if measured <= 0 or predicted <= 0:
        return None
    return Measurement(job_id=status.job_id or job.id, attempt=attempt,
                       model=job.spec.model, gpu_type=job.option.gpu_type,
                       predicted_bytes=predicted, measured_bytes=measured, outcome=outcome,
                       framework=job.spec.training.framework or "frenzy",
                       family=model_family(job.spec.model))


def empty_record() -> dict[str, Any]:
    return {"jobs": 0, "sum_abs_error": 0.0, "worst_under_prediction": 0.0, "last_job_id": "",
            "recent": []}


def apply(record: Mapping[str, Any] | None, m: Measurement,
          window: int = DEDUPE_WINDOW) -> tuple[dict[str, Any], bool]:
    """The record with m folded in, and whether m counted (False for a redelivery).

    Returns a new dict; the one given is left unchanged (a faust table needs a reassignment to
    write its changelog anyway).
    """
    current = dict(record) if record else empty_record()
    recent = list(current.get("recent", []))
    if m.measurement_id in recent:
        return current, False
    error = m.error
    recent.append(m.measurement_id)
    del recent[:max(len(recent) - window, 0)]
    ratios = list(current.get("ratios", [])) + [m.measured_bytes / m.predicted_bytes]
    current.update(
        framework=m.framework, family=m.family, gpu_type=m.gpu_type,
        ratios=ratios[-RATIO_WINDOW:],
        jobs=int(current.get("jobs", 0)) + 1,
        sum_abs_error=float(current.get("sum_abs_error", 0.0)) + abs(error),
        worst_under_prediction=min(float(current.get("worst_under_prediction", 0.0)), error),
        last_job_id=m.job_id,
        recent=recent)
    return current, True


def aggregate(measurements: Iterable[Measurement],
              window: int = DEDUPE_WINDOW) -> dict[str, dict[str, Any]]:
    """Fold measurements into records per key, as the table does (for tests and replays)."""
    records: dict[str, dict[str, Any]] = {}
    for m in measurements:
        records[m.key], _ = apply(records.get(m.key), m, window)
    return records


def upper_quantile(values: Iterable[float], q: float) -> float:
    """Nearest-rank q-quantile: the smallest value at least a fraction q of values do not exceed."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("upper_quantile of no values")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def learned_margins(records: Mapping[str, Mapping[str, Any]], *, quantile: float = MARGIN_QUANTILE,
                    min_samples: int = MARGIN_MIN_SAMPLES,
                    max_margin: float = MARGIN_MAX) -> dict[str, float]:
    """Safety factor per margin_key(framework, family, GPU type): the upper `quantile` of the
    measured / predicted peaks of the jobs recorded under it, bounded to [1, max_margin].

    Keys with fewer than `min_samples` ratios get none: one surprising job must not move
    planning. A factor below 1 (MARP over-predicts) is not applied: the record is evidence of
    risk, and a plan that fits by the prediction is kept.
    """
    pooled: dict[str, list[float]] = {}
    for record in records.values():
        ratios = record.get("ratios") or []
        if not ratios or "gpu_type" not in record:
            continue
        key = margin_key(str(record.get("framework", "frenzy")), str(record.get("family", "")),
                         str(record["gpu_type"]))
        pooled.setdefault(key, []).extend(float(r) for r in ratios)
    return {key: min(max(upper_quantile(ratios, quantile), 1.0), max_margin)
            for key, ratios in sorted(pooled.items()) if len(ratios) >= min_samples}


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the web view shows for one key: the record without its dedupe ids, plus the mean."""
    jobs = int(record.get("jobs", 0))
    total = float(record.get("sum_abs_error", 0.0))
    return {"jobs": jobs, "sum_abs_error": total,
            "mean_abs_error": total / jobs if jobs else 0.0,
            "worst_under_prediction": float(record.get("worst_under_prediction", 0.0)),
            "last_job_id": str(record.get("last_job_id", ""))}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(records: Mapping[str, Mapping[str, Any]]) -> str:
    """Prometheus text exposition (format 0.0.4) of the table: three gauges per key."""
    gauges = (
        ("frenzy_predictor_memory_error_jobs", "jobs whose measured peak memory was recorded",
         lambda s: s["jobs"]),
        ("frenzy_predictor_memory_error_mean_abs_ratio",
         "mean |predicted - measured| / measured peak memory per GPU", lambda s: s["mean_abs_error"]),
        ("frenzy_predictor_memory_error_worst_under_ratio",
         "most negative (predicted - measured) / measured, 0 if none",
         lambda s: s["worst_under_prediction"]),
    )
    summaries = {key: summary(record) for key, record in sorted(records.items())}
    lines = []
    for name, help_text, get in gauges:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for key, s in summaries.items():
            model, gpu_type = split_key(key)
            value = float(get(s))
            text = repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                             ("+Inf" if value > 0 else "-Inf"))
            lines.append(f'{name}{{model="{_label(model)}",gpu_type="{_label(gpu_type)}"}} {text}')
    return "\n".join(lines) + "\n"
