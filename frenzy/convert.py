"""Domain dataclasses <-> protobuf messages."""
from __future__ import annotations

from frenzy.domain import ParallelPlan, PlanOption
from frenzy.v1 import types_pb2


def plan_to_proto(plan: ParallelPlan) -> types_pb2.ParallelPlan:
    return types_pb2.ParallelPlan(dp=plan.dp, tp=plan.tp, pp=plan.pp, zero=plan.zero,
                                  micro_batch=plan.micro_batch, recompute=plan.recompute,
                                  sequence_parallel=plan.sequence_parallel, cp=plan.cp, ep=plan.ep)


def plan_from_proto(msg: types_pb2.ParallelPlan) -> ParallelPlan:
    return ParallelPlan(dp=msg.dp or 1, tp=msg.tp or 1, pp=msg.pp or 1, zero=msg.zero,
                        micro_batch=msg.micro_batch or 1, recompute=msg.recompute or "none",
                        sequence_parallel=msg.sequence_parallel, cp=msg.cp or 1, ep=msg.ep or 1)


def option_to_proto(option: PlanOption, rank: int = 0) -> types_pb2.PlanOption:
    return types_pb2.PlanOption(
        gpu_type=option.gpu_type, num_gpus=option.num_gpus, plan=plan_to_proto(option.plan),
        peak_bytes_per_gpu=option.peak_bytes_per_gpu, step_time_s=option.step_time_s,
        duration_s=option.duration_s, rank=rank, peak_allocated_bytes=option.peak_allocated_bytes,
        peak_reserved_bytes=option.peak_reserved_bytes, memory_margin=option.memory_margin)


def option_from_proto(msg: types_pb2.PlanOption) -> PlanOption:
    return PlanOption(gpu_type=msg.gpu_type, plan=plan_from_proto(msg.plan),
                      peak_bytes_per_gpu=msg.peak_bytes_per_gpu, step_time_s=msg.step_time_s,
                      duration_s=msg.duration_s, peak_allocated_bytes=msg.peak_allocated_bytes,
                      peak_reserved_bytes=msg.peak_reserved_bytes,
                      memory_margin=msg.memory_margin or 1.0)


def plan_json(plan: types_pb2.ParallelPlan) -> dict:
    """The FRENZY_PLAN contract the node agent hands to a job process."""
    return {"dp": plan.dp or 1, "tp": plan.tp or 1, "pp": plan.pp or 1, "zero": plan.zero,
            "micro_batch": plan.micro_batch or 1, "recompute": plan.recompute or "none",
            "sequence_parallel": plan.sequence_parallel}


def describe_plan(plan: types_pb2.ParallelPlan) -> str:
    return plan_from_proto(plan).describe()
