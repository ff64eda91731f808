"""Heterogeneity-unaware first-fit: what most clusters run today."""
from __future__ import annotations

from typing import Sequence

from frenzy_scheduler.core import (ClusterView, Decision, Placement, QueuedJob, RunningJob,
                                  option_alternatives)
from frenzy_scheduler.placement import first_fit


class FifoPolicy:
    """Strict arrival order; each job takes its smallest-GPU-count option on any type with room.

    Head-of-line blocking is intended: this is the baseline.
    """

    name = "fifo"
    round_s = 0.0

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        view = cluster.copy()
        placements: list[Placement] = []
        for job in sorted(queue, key=lambda j: (j.submit_time_s, j.job_id)):
            placed = None
            for option in sorted(job.options, key=lambda o: (o.num_gpus, o.gpu_type)):
                assignments = first_fit(view, option.gpu_type, option.num_gpus,
                                        granularity=max(1, option.plan.tp))
                if assignments is not None:
                    placed = Placement(job.job_id, option, assignments, decision=Decision(
                        "fifo", "oldest job; fewest GPUs on any type with room (first fit)",
                        option_alternatives(job.options, option)))
                    break
            if placed is None:
                break
            view.take(placed.assignments)
            placements.append(placed)
        return placements
