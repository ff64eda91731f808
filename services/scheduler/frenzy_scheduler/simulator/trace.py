"""Job traces: the Philly CSV, or a generic CSV of submit time, duration and GPU count.

Philly (processed by the Pollux artifact): `timestamp,duration,num_gpus,gpu_time,cluster`.
Generic: `submit_time` (seconds, or an ISO date-time), `duration` (s), `num_gpus`, and
optionally `gpu_type` (the type the job ran on), `model` (a catalog model), `deadline`
(seconds after submission), `job_id`.
Submit times come back in seconds since the first job of the whole file.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


@dataclass(frozen=True)
class TraceJob:
    job_id: str
    submit_time_s: float
    duration_s: float
    num_gpus: int
    gpu_type: str = ""  # the type the trace job ran on, when the trace says
    model: str = ""  # a catalog model name, when the trace says
    deadline_after_s: float = 0.0  # relative to submission; 0: none


def _seconds(text: str) -> float:
    """Seconds since the epoch from a number or an ISO date-time (naive = UTC)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return moment.timestamp()


def load_trace(path: str | Path) -> list[TraceJob]:
    """Every job of a trace file, sorted by submit time; ValueError names the bad row/field."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"trace file {str(path)!r} does not exist")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        fields = set(reader.fieldnames or ())
        time_field = "timestamp" if "timestamp" in fields else "submit_time"
        missing = {time_field, "duration", "num_gpus"} - fields
        if missing:
            raise ValueError(f"trace {path.name}: missing column(s) {', '.join(sorted(missing))}; "
                             "need submit_time (or timestamp), duration, num_gpus")
        raw: list[tuple[float, int, TraceJob]] = []
        for line, row in enumerate(reader, start=2):
            try:
                submit = _seconds(row[time_field])
                duration = float(row["duration"])
                gpus = int(float(row["num_gpus"]))
                deadline = float(row.get("deadline") or 0.0)
            except (TypeError, ValueError) as err:
                raise ValueError(f"trace {path.name} line {line}: {err}") from None
            if duration <= 0 or gpus <= 0:
                continue  # failed-at-submit jobs carry no work
            job_id = (row.get("job_id") or "").strip() or f"job-{line - 2}"
            raw.append((submit, line, TraceJob(job_id, submit, duration, gpus,
                                               (row.get("gpu_type") or "").strip(),
                                               (row.get("model") or "").strip(), deadline)))
    raw.sort(key=lambda item: (item[0], item[1]))
    if not raw:
        return []
    origin = raw[0][0]
    return [TraceJob(j.job_id, j.submit_time_s - origin, j.duration_s, j.num_gpus, j.gpu_type,
                     j.model, j.deadline_after_s) for _, _, j in raw]


def parse_start(text: str, trace_origin_s: float | None = None) -> float:
    """`--start`: seconds after the trace's first job, or an ISO date-time (needs the origin)."""
    try:
        return float(text)
    except ValueError:
        if trace_origin_s is None:
            raise ValueError("start: an ISO time needs the trace origin") from None
        return _seconds(text) - trace_origin_s


def trace_origin_s(path: str | Path) -> float:
    """Epoch seconds of the first job of a trace (to turn an ISO --start into an offset)."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        time_field = "timestamp" if "timestamp" in (reader.fieldnames or ()) else "submit_time"
        return min(_seconds(row[time_field]) for row in reader)


def select_window(jobs: list[TraceJob], start_s: float = 0.0, count: int = 0) -> list[TraceJob]:
    """The first `count` jobs (0: all) submitted at or after `start_s`, rebased to start at 0."""
    window = [j for j in jobs if j.submit_time_s >= start_s]
    if count:
        window = window[:count]
    if not window:
        return []
    base = window[0].submit_time_s
    return [TraceJob(j.job_id, j.submit_time_s - base, j.duration_s, j.num_gpus, j.gpu_type,
                     j.model, j.deadline_after_s) for j in window]
