"""Placement: given a GPU type and a count, pick nodes and GPU indices (separate from policy)."""
from __future__ import annotations

from typing import Sequence

from frenzy_scheduler.core import ClusterView, NodeState


def first_fit(cluster: ClusterView, gpu_type: str, count: int,
              per_node: int = 0) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """Take GPUs from nodes in id order; with per_node > 0, a node gives exactly per_node GPUs."""
    nodes: Sequence[NodeState] = sorted(
        (n for n in cluster.nodes.values() if n.gpu_type == gpu_type and n.num_free),
        key=lambda n: n.node_id)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    needed = count
    for node in nodes:
        if needed == 0:
            break
        take = min(node.num_free, needed)
        if per_node and take < per_node:
            continue
        if per_node:
            take = per_node
        chosen.append((node.node_id, tuple(node.free_gpus[:take])))
        needed -= take
    return tuple(chosen) if needed == 0 else None
