"""From a job spec to JobPlanned: the predictor's pure core, shared by the service and PredictorService."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from frenzy.catalog.gpus import GpuType, gpu_catalog
from frenzy.convert import option_to_proto
from frenzy.domain import PlanOption
from frenzy.jobspec import resolve_spec
from frenzy.v1 import events_pb2, types_pb2
from frenzy_predictor.error_table import margin_key, model_family
from frenzy_predictor.plans import FIT_MARGIN, enumerate_options


def plan_job(spec: types_pb2.JobSpec, gpu_types: list[GpuType] | None = None,
             min_memory_bytes: int = 0,
             margins: Mapping[str, float] | None = None) -> tuple[list[PlanOption], int]:
    """Ranked options for a spec over the given GPU types (default: the whole catalog).

    min_memory_bytes > 0 is a re-plan after an out-of-memory failure: the job really needs at
    least that much per GPU, so options are re-checked with that floor in place of the prediction.
    margins: learned safety factors per error_table.margin_key(framework, family, GPU type)
    (error_table.learned_margins); the spec's framework and model family pick them.
    """
    job = resolve_spec(spec)  # raises SpecError naming the field
    types = gpu_types if gpu_types is not None else list(gpu_catalog().values())
    family = model_family(spec.model)
    framework = job.training.recipe.framework
    per_type = {t.name: margins[k] for t in types
                if margins and (k := margin_key(framework, family, t.name)) in margins}
    options = enumerate_options(job.arch, job.training, types, job.constraints,
                                min_gpus=job.constraints.min_gpus, memory_margins=per_type)
    if min_memory_bytes:
        by_name = gpu_catalog()
        options = [replace(o, peak_bytes_per_gpu=max(o.peak_bytes_per_gpu, min_memory_bytes))
                   for o in options
                   if max(o.peak_bytes_per_gpu, min_memory_bytes) <= FIT_MARGIN * by_name[o.gpu_type].memory_bytes]
    return options, job.arch.num_params()


def job_planned(submitted: events_pb2.JobSubmitted,
                margins: Mapping[str, float] | None = None) -> events_pb2.JobPlanned:
    options, num_params = plan_job(submitted.spec, min_memory_bytes=submitted.min_memory_bytes,
                                   margins=margins)
    planned = events_pb2.JobPlanned(
        job_id=submitted.job_id, options=[option_to_proto(o, i) for i, o in enumerate(options)],
        attempt=submitted.attempt, num_params=num_params,
        reason="" if options else "unschedulable: no GPU type fits any plan that the "
                                  f"{submitted.spec.training.framework or 'frenzy'} launcher runs "
                                  "(frenzy.runnable)")
    planned.submitted_at.CopyFrom(submitted.submitted_at)
    if submitted.spec.constraints.HasField("deadline"):
        planned.deadline.CopyFrom(submitted.spec.constraints.deadline)
    return planned
