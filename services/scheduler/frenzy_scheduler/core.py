"""The one interface every scheduling policy implements, and the cluster view it reads.

A policy is pure: given the queue, a snapshot of free GPUs, the running jobs and the time, it
returns actions: placements of queued jobs and, for an elastic policy, reshapes of running ones
(resize, migrate, preempt: `ReshapeJob` in the contract). Each action carries a decision record
(the chosen option, the alternatives with their estimated completion, the reason). The live
scheduler service and the trace simulator both call `Policy.schedule` and execute the result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from frenzy.domain import PlanOption
from frenzy_scheduler import progress as _progress
# The actions and their records live in their own module, compiled with the policy that builds
# hundreds a call (frenzy_scheduler/actions.py); re-exported here, where policies and services
# import them
from frenzy_scheduler.actions import (MIGRATE, PLACE, PREEMPT, RESIZE,  # noqa: F401
                                      Alternative, Decision, Placement)


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
    # A preempted job comes back with its options' durations already scaled to the work left;
    # this says how much that is (1.0: a fresh job), for policies that report it.
    remaining_fraction: float = 1.0


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs; optional input that lets a policy predict when GPUs free up."""

    job_id: str
    option: PlanOption
    assignments: tuple[tuple[str, tuple[int, ...]], ...]
    start_time_s: float  # the latest (re)start: when it got these GPUs
    expected_end_s: float  # predicted: start + overheads + predicted remaining work
    # What an elastic policy needs (callers that do not know it leave the defaults; a job with
    # no options is never reshaped): the job's full option menu (durations for all its work),
    # the fraction of its work left at this start, when its restore ends (Sia pins restoring
    # jobs), its submit time and deadline, and its progress rate if known (live: from the
    # steps done; 0: assume the predicted rate).
    options: tuple[PlanOption, ...] = ()
    fraction_at_start: float = 1.0
    restoring_until_s: float = 0.0
    submit_time_s: float = 0.0
    deadline_s: float = 0.0
    fraction_per_s: float = 0.0
    restarts: int = 0  # resumes so far (Sia's restart damping counts them)
    # Progress and checkpoint age: what a move would cost besides the restart. Live, from the
    # orchestrator's job record (steps, the last committed checkpoint and when it was seen);
    # the simulator, from its periodic checkpoints (every `checkpoint_interval_s` of productive
    # time, as it charges a node failure). `saves_on_request`: a move's checkpoint-now saves the
    # latest step (the reference trainer, and every simulated job); otherwise the move redoes
    # the work since the last committed checkpoint (live: a job that never committed one).
    step: int = 0
    steps: int = 0  # 0: unknown
    checkpoint_step: int = 0
    last_checkpoint_s: float = 0.0  # when the newest committed checkpoint was seen; 0: none this run
    checkpoint_interval_s: float = 0.0  # > 0: periodic checkpoints, last_checkpoint_s not kept current
    saves_on_request: bool = True
    # What its latest start cost, launch and restore (live: from the attempt's placement to its
    # first step); a move's restart is expected to cost as much. 0: unknown (the policy's own
    # estimate; the simulator leaves it so, every policy pays its configured overheads).
    restart_s: float = 0.0
    # Derived once, at construction, for the policies that read them of every running job at
    # most decisions (the whole Philly trace: hundreds of thousands of times). Not cached
    # properties: those keep their value in the instance's `__dict__`, made on first read,
    # and every attribute read of an instance with a dict goes through it, about 2.4x slower
    # than through the inline values CPython 3.11 keeps otherwise (frenzy.domain.PlanOption).
    # When it should end: extrapolated from its measured progress rate when known (live: step
    # times; the rate is steady once restored), else the predicted end
    estimated_end_s: float = field(init=False, repr=False, compare=False)
    # (when its work (re)began, the fraction of its work done per second): fixed for the run
    progress: tuple[float, float] = field(init=False, repr=False, compare=False)
    num_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        begin_s = max(self.start_time_s, self.restoring_until_s)
        estimated_end_s = begin_s + self.fraction_at_start / self.fraction_per_s \
            if self.fraction_per_s > 0 else self.expected_end_s
        rate = self.fraction_per_s
        if rate <= 0:
            span_s = self.expected_end_s - begin_s
            rate = self.fraction_at_start / span_s if span_s > 0 else math.inf
        object.__setattr__(self, "estimated_end_s", estimated_end_s)
        object.__setattr__(self, "progress", (begin_s, rate))
        object.__setattr__(self, "num_gpus", sum(len(gpus) for _, gpus in self.assignments))

    # What is left and what a move throws away (frenzy_scheduler/progress.py, compiled with
    # the policies that read them of every running job)
    def remaining_fraction(self, now_s: float) -> float:
        return _progress.remaining_fraction(self, now_s)

    def checkpoint_age_s(self, now_s: float) -> float:
        return _progress.checkpoint_age_s(self, now_s)

    def redo_s(self, now_s: float) -> float:
        return _progress.redo_s(self, now_s)


def option_alternatives(options: Sequence[PlanOption], chosen: PlanOption, limit: int = 6,
                        verdict: str = "not chosen by the policy's rule") -> tuple[Alternative, ...]:
    """The chosen option and the fastest others, each as if started now (for policies that do
    not estimate start times; `has` records its own estimates)."""
    others = sorted((o for o in options if o != chosen), key=lambda o: o.duration_s)[:limit - 1]
    return (Alternative(chosen, 0.0, chosen.duration_s, "chosen"),
            *(Alternative(o, 0.0, o.duration_s, verdict) for o in others))


class Policy(Protocol):
    name: str
    # > 0: a round-based policy (Sia), called every round_s while jobs are active, besides events.
    round_s: float

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        """Choose placements for some queued jobs (and reshapes of running ones, for an elastic
        policy); must not mutate `cluster`.

        `running` is optional: callers that know the running jobs pass them so a policy can
        estimate when GPUs free up; every policy must also work without it. The caller applies
        every reshape's release before any action's take, so a placement may use GPUs that a
        reshape in the same answer frees.
        """
        ...
