"""The one interface every scheduling policy implements, and the cluster view it reads.

A policy is pure: given the queue, a snapshot of free GPUs and the time, it returns placements.
The live scheduler service and the trace simulator both call `Policy.schedule`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, Sequence

from frenzy.domain import PlanOption


@dataclass
class NodeState:
    node_id: str
    gpu_type: str
    total_gpus: int
    free_gpus: list[int]  # indices of free GPUs on this node

    @property
    def num_free(self) -> int:
        return len(self.free_gpus)


@dataclass
class ClusterView:
    nodes: dict[str, NodeState] = field(default_factory=dict)

    def copy(self) -> "ClusterView":
        return ClusterView({k: NodeState(n.node_id, n.gpu_type, n.total_gpus, list(n.free_gpus))
                            for k, n in self.nodes.items()})

    def free_by_type(self) -> dict[str, int]:
        free: dict[str, int] = {}
        for node in self.nodes.values():
            free[node.gpu_type] = free.get(node.gpu_type, 0) + node.num_free
        return free

    def total_by_type(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for node in self.nodes.values():
            total[node.gpu_type] = total.get(node.gpu_type, 0) + node.total_gpus
        return total

    def take(self, assignments: Sequence[tuple[str, Sequence[int]]]) -> None:
        """Mark GPUs busy; ValueError if any is not free (never double-book)."""
        for node_id, gpus in assignments:
            node = self.nodes[node_id]
            missing = set(gpus) - set(node.free_gpus)
            if missing:
                raise ValueError(f"GPUs {sorted(missing)} on {node_id} are not free")
        for node_id, gpus in assignments:
            node = self.nodes[node_id]
            node.free_gpus = [g for g in node.free_gpus if g not in set(gpus)]

    def give_back(self, assignments: Sequence[tuple[str, Sequence[int]]]) -> None:
        for node_id, gpus in assignments:
            node = self.nodes.get(node_id)
            if node is not None:
                node.free_gpus = sorted(set(node.free_gpus) | set(gpus))


@dataclass
class QueuedJob:
    job_id: str
    submit_time_s: float
    options: Sequence[PlanOption]  # MARP's feasible options, each with its estimated duration
    deadline_s: float = 0.0  # absolute time the job should finish by; 0: none
    attempt: int = 0


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs; optional input that lets a policy predict when GPUs free up."""

    job_id: str
    option: PlanOption
    assignments: tuple[tuple[str, tuple[int, ...]], ...]
    start_time_s: float
    expected_end_s: float

    @cached_property
    def num_gpus(self) -> int:  # cached: policies read it for every running job, every decision
        return sum(len(gpus) for _, gpus in self.assignments)


@dataclass(frozen=True)
class Placement:
    job_id: str
    option: PlanOption
    assignments: tuple[tuple[str, tuple[int, ...]], ...]  # (node_id, GPU indices) per node


class Policy(Protocol):
    name: str

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        """Choose placements for some queued jobs; must not mutate `cluster`.

        `running` is optional: callers that know the running jobs pass them so a policy can
        estimate when GPUs free up; every policy must also work without it.
        """
        ...
