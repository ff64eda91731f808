"""One placement check, shared by the simulator, the live scheduler and the orchestrator.

It used to be written three times with different rules (the orchestrator did not check tp
groups, the simulator did not check node health). Pure: callers pass what they know about the
nodes, and get back "" or the reason the placement is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Mapping, Sequence

from frenzy.catalog.gpus import get_gpu


@dataclass(frozen=True)
class NodeFacts:
    """What the check needs to know about one node."""

    gpu_type: str
    free_gpus: frozenset[int] | set[int]
    ready: bool = True


def placement_problem(gpu_type: str, num_gpus: int, tp: int,
                      assignments: Sequence[tuple[str, Sequence[int]]],
                      nodes: Mapping[str, NodeFacts]) -> str:
    """Why `assignments` cannot host a plan of `num_gpus` GPUs of `gpu_type`; "" if it can.

    Rules: at least one node; each node known, ready and listed once; its GPU type is the
    plan's, or one with at least its memory and speed (a job spanning memory tiers, as Frenzy's
    policy places them, names its slowest, smallest type and is timed there); no GPU listed
    twice or busy; each node holds whole tensor-parallel groups (a tp group never straddles
    nodes); the count equals the plan's.
    """
    if not assignments:
        return "no GPUs assigned"
    step = max(1, tp)
    count = 0
    seen: set[str] = set()
    for node_id, gpus in assignments:
        node = nodes.get(node_id)
        if node is None:
            return f"unknown node {node_id}"
        if node_id in seen:
            return f"node {node_id} listed twice"
        seen.add(node_id)
        if not node.ready:
            return f"node {node_id} is lost"
        if node.gpu_type != gpu_type and not covers(node.gpu_type, gpu_type):
            return f"node {node_id} has {node.gpu_type}, plan wants {gpu_type}"
        if len(set(gpus)) != len(gpus):
            return f"GPU listed twice on {node_id}: {list(gpus)}"
        busy = sorted(set(gpus) - set(node.free_gpus))
        if busy:
            return f"GPUs {busy} on {node_id} are not free"
        if len(gpus) % step:
            return f"{len(gpus)} GPUs on {node_id} split a tp={tp} group across nodes"
        count += len(gpus)
    if count != num_gpus:
        return f"{count} GPUs assigned, plan needs {num_gpus}"
    return ""


@cache
def covers(node_type: str, plan_type: str) -> bool:
    """Can a GPU of `node_type` stand in for one of `plan_type` (as much memory, as fast)?"""
    try:
        node, plan = get_gpu(node_type), get_gpu(plan_type)
    except KeyError:
        return False
    return (node.memory_bytes >= plan.memory_bytes
            and node.peak_tflops_16bit >= plan.peak_tflops_16bit)
