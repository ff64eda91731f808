"""Placement: given a GPU type and a count, pick nodes and GPU indices (separate from policy).

Policies decide *which job, which option*; these functions decide *which GPUs*. Every policy
works on a private `FreeIndex` built from the `ClusterView` snapshot, so the caller's view is
never mutated, and best-fit costs O(GPUs per node) instead of O(nodes).
"""
from __future__ import annotations

from typing import Sequence

from frenzy_scheduler.core import ClusterView, NodeState

Assignments = tuple[tuple[str, tuple[int, ...]], ...]


def first_fit(cluster: ClusterView, gpu_type: str, count: int, per_node: int = 0,
              granularity: int = 1) -> Assignments | None:
    """Take GPUs from nodes in id order; with per_node > 0, a node gives exactly per_node GPUs.

    A node contributes a multiple of `granularity` (the plan's tp degree) GPUs.
    """
    nodes: Sequence[NodeState] = sorted(
        (n for n in cluster.nodes.values() if n.gpu_type == gpu_type and n.num_free),
        key=lambda n: n.node_id)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    needed = count
    for node in nodes:
        if needed == 0:
            break
        take = min(node.num_free, needed) // granularity * granularity
        if take == 0:
            continue
        if per_node and take < per_node:
            continue
        if per_node:
            take = per_node
        chosen.append((node.node_id, tuple(node.free_gpus[:take])))
        needed -= take
    return tuple(chosen) if needed == 0 else None


class FreeIndex:
    """Free GPUs of a cluster snapshot, bucketed per GPU type by how many a node has free.

    `buckets[type][k]` holds the ids of nodes of that type with exactly k free GPUs (a dict
    used as an insertion-ordered set, so results are deterministic).
    """

    def __init__(self, cluster: ClusterView) -> None:
        self.free: dict[str, list[int]] = {}
        self.node_type: dict[str, str] = {}
        self.buckets: dict[str, list[dict[str, None]]] = {}
        self.free_by_type: dict[str, int] = {}
        self.node_size: dict[str, int] = {}  # largest node of each type, in GPUs
        for node_id in sorted(cluster.nodes):
            node = cluster.nodes[node_id]
            size = max(node.total_gpus, len(node.free_gpus))
            self.node_size[node.gpu_type] = max(self.node_size.get(node.gpu_type, 0), size)
        for node_id in sorted(cluster.nodes):
            node = cluster.nodes[node_id]
            buckets = self.buckets.setdefault(
                node.gpu_type, [dict() for _ in range(self.node_size[node.gpu_type] + 1)])
            self.free[node_id] = list(node.free_gpus)
            self.node_type[node_id] = node.gpu_type
            buckets[len(node.free_gpus)][node_id] = None
            self.free_by_type[node.gpu_type] = (self.free_by_type.get(node.gpu_type, 0)
                                                + len(node.free_gpus))

    def total_free(self) -> int:
        return sum(self.free_by_type.values())

    def best_fit(self, gpu_type: str, count: int, granularity: int = 1) -> Assignments | None:
        """Frenzy's node rule: a node that exactly fits; else the node with the fewest free GPUs
        that still fits; else fill the node with the most free GPUs and repeat for the rest.

        `granularity` (the plan's tensor-parallel degree) is the unit a node may contribute, so
        a tp group never straddles nodes. Returns None when the type cannot host `count` now.
        """
        if count <= 0 or self.free_by_type.get(gpu_type, 0) < count:
            return None
        buckets = self.buckets[gpu_type]
        step = max(1, granularity)
        if count % step:
            return None
        used: set[str] = set()
        chosen: list[tuple[str, tuple[int, ...]]] = []
        remaining = count
        while remaining:
            node_id = None
            for k in range(remaining, len(buckets)):  # smallest node that still fits
                node_id = next((n for n in buckets[k] if n not in used), None)
                if node_id is not None:
                    break
            if node_id is not None:
                take = remaining
            else:  # no single node fits the rest: take the largest usable chunk
                for k in range(len(buckets) - 1, 0, -1):
                    if k // step * step == 0:
                        break
                    node_id = next((n for n in buckets[k] if n not in used), None)
                    if node_id is not None:
                        break
                if node_id is None:
                    return None
                take = min(remaining, len(self.free[node_id]) // step * step)
            used.add(node_id)
            chosen.append((node_id, tuple(self.free[node_id][:take])))
            remaining -= take
        return tuple(chosen)

    def take(self, assignments: Assignments) -> None:
        """Reserve GPUs in this index (the reserve step); ValueError on a double booking."""
        for node_id, gpus in assignments:
            free = self.free[node_id]
            if not set(gpus) <= set(free):
                raise ValueError(f"GPUs {sorted(set(gpus) - set(free))} on {node_id} are not free")
            gpu_type = self.node_type[node_id]
            del self.buckets[gpu_type][len(free)][node_id]
            taken = set(gpus)
            self.free[node_id] = [g for g in free if g not in taken]
            self.buckets[gpu_type][len(self.free[node_id])][node_id] = None
            self.free_by_type[gpu_type] -= len(gpus)
