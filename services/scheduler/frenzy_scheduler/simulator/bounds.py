"""The least JCT any policy can give a job in this simulator: a floor for the benchmark's ratios.

A goal such as "`has` at most 0.85x elastic Sia's average JCT" is reachable on a window only if
0.85x Sia's average is above what no policy can beat. This module computes that floor, job by
job, from the engine's own rules (`engine.simulate`), without simulating anything:

* a run of option `o` on `n` nodes pays the launch overhead `config.launch_s(n)` before it makes
  progress, and then progresses at `1 / (o.duration_s x error)` of the job's work per second
  (`start`: `true_s = predicted_s x errors[job_id]`);
* a resume pays a restart overhead on top, and a node failure loses work; both only add time.

So a job that runs its work in parts `f_1 ... f_k` (summing to 1) on options `o_1 ... o_k`
finishes no earlier than its submission plus `sum_i launch(o_i) + f_i x true(o_i)`, which is at
least `sum_i f_i x (launch(o_i) + true(o_i))` (every launch is >= 0 and every `f_i` <= 1), a
weighted mean of per-option values, and so at least their minimum. The floor is that minimum:
the job started the moment it arrives, alone on the cluster, on its best option, never moved.
It ignores every other job, so it is loose where jobs contend; it is exact for a lone job.

It bounds every policy that runs options of the job's menu, which the engine checks for all
but one: `frenzy`, as the public code does, may run a plan on a type MARP gave no option for,
timed by peak FLOPs, and across node types (`policies.frenzy.timed_option`), so its runs can
beat the floor.

Launches are counted on the fewest nodes an option could span (its GPUs over the type's largest
node), which no placement beats; options on types the cluster lacks, or wider than the type's
GPUs, cannot run and are skipped.
"""
from __future__ import annotations

import math
from typing import Sequence

from frenzy_scheduler.placement import FreeIndex
from frenzy_scheduler.simulator.engine import SimConfig
from frenzy_scheduler.simulator.workload import SimJob


def fewest_nodes(gpus: int, largest_node_gpus: int) -> int:
    """The fewest nodes `gpus` GPUs can span when no node of the type has more than
    `largest_node_gpus`."""
    return max(1, math.ceil(gpus / largest_node_gpus))


def least_jct_s(job: SimJob, config: SimConfig, cluster: FreeIndex) -> float:
    """The floor of the job's JCT (module docstring) on a cluster (its `node_size`, the
    largest node of each type, and `capacity`); inf when no option can run at all."""
    error = config.error_factor(job.job_id)
    best_s = math.inf
    for option in job.options:
        largest = cluster.node_size.get(option.gpu_type, 0)
        if largest <= 0 or option.num_gpus > cluster.capacity.get(option.gpu_type, 0):
            continue
        launch_s = config.launch_s(fewest_nodes(option.num_gpus, largest))
        best_s = min(best_s, launch_s + option.duration_s * error)
    return best_s


def least_jcts_s(jobs: Sequence[SimJob], config: SimConfig, cluster: FreeIndex
                 ) -> dict[str, float]:
    """`least_jct_s` per job id, for the jobs some option of which can run."""
    floors = {job.job_id: least_jct_s(job, config, cluster) for job in jobs}
    return {job_id: floor_s for job_id, floor_s in floors.items() if floor_s < math.inf}
