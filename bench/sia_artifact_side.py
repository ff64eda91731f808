"""The Sia side of `bench/sia_crosscheck.py`: runs Sia's own simulator (siasosp23/artifacts,
`sia-simulator/`) on a case spec and writes what it did as JSON.

Run in its own process by `sia_crosscheck.py` (Sia's modules have generic names, `job`,
`cluster`, `utils`, and print on every round), with the artifact's directory first on the
path:

    python bench/sia_artifact_side.py SIA_DIR SPEC.json OUT.json

The artifact's code is used as it is. Only these shims are applied, here, before importing it
(it was written for numpy 1.23 and pandas 1.x, and we run numpy 2 and pandas 3):

* `numpy.int = int` (`goodput.py` uses the alias removed in numpy 1.24);
* `pandas.DataFrame.append` as `pandas.concat` (removed in pandas 2; `applications.py
  get_throughput` uses it to interpolate placements that were not profiled);
* `simulator_config`: the case's cluster (`cluster_nnodes`), one CBC thread
  (`sia_solver_num_threads`; the artifact uses 8), and its logging switched off.

The main loop is `multi_simulator.py multi_simulate`'s (`cluster.step(interval)` until
`all_complete()`), without its per-round table.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path


def _shims() -> None:
    import numpy
    import pandas

    if not hasattr(numpy, "int"):
        numpy.int = int  # type: ignore[attr-defined]
    if not hasattr(pandas.DataFrame, "append"):
        def append(self, other, ignore_index=False):  # the pandas 1.x method, as concat
            return pandas.concat([self, other], ignore_index=ignore_index)
        pandas.DataFrame.append = append  # type: ignore[attr-defined]


def sia_placement(num_gpus: int, gpus_per_node: int) -> list[int]:
    """The per-node GPU counts Sia's `alloc_to_placement_fast` gives `num_gpus` on empty nodes:
    whole nodes first, then the rest on one node."""
    placement = [gpus_per_node] * (num_gpus // gpus_per_node)
    if num_gpus % gpus_per_node:
        placement.append(num_gpus % gpus_per_node)
    return placement


def run(sia_dir: str, spec: dict) -> dict:
    sys.path.insert(0, sia_dir)
    os.chdir(sia_dir)
    _shims()
    import pandas

    import simulator_config as sim_config
    sim_config.cluster_nnodes = dict(spec["cluster_nnodes"])
    sim_config.sia_solver_num_threads = 1
    sim_config.sia_solver_verbose = False
    sim_config.log_cluster_verbose = False
    sim_config.log_sched_decisions = False
    sim_config.num_parallel_jobs = 1
    from cluster import Cluster
    from job import Job
    from sia import SiaPolicy, get_restart_penalty

    ngpus = {k: sim_config.cluster_ngpus_per_node[k] for k in sim_config.cluster_nnodes}
    workload = pandas.DataFrame(spec["jobs"])
    policy = SiaPolicy(p_fairness=spec["p"], restart_penalty=30, lambda_a=spec["lambda_a"],
                       lambda_n=spec["lambda_n"], project_throughputs=True,
                       share_max_replicas=True, enable_bsz_tuning=False)
    policy.populate_valid_configs(sim_config.cluster_nnodes, ngpus,
                                  sim_config.cluster_max_physical_nnodes)
    cluster = Cluster(workload, policy, sim_config.cluster_nnodes, ngpus,
                      max_physical_nodes=sim_config.cluster_max_physical_nnodes)
    for job in cluster.jobs:  # multi_simulate: seed the profiles of rigid jobs
        if job.category == "rigid":
            job.seed_profiles_rigid(ngpus)
    if spec.get("oracle_num_nodes"):  # multi_simulate's --oracle_num_nodes/--oracle_num_replicas
        for job in cluster.jobs:
            job.seed_profiles(spec["oracle_num_nodes"], spec["oracle_num_replicas"])

    rounds = []
    while not cluster.all_complete():
        cluster.step(spec["interval_s"])
        log = cluster.logs[-1]
        rounds.append({"t": log["timestamp"], "alloc": {
            v["name"]: [v["cluster"], int(sum(v["placement"])), list(v["placement"])]
            for v in log["submitted_jobs"]
            if v["completion_time"] is None and v["placement"]}})
        if cluster.current_time > spec["max_time_s"]:
            break
    # What Sia's policy believed at the end: its goodput model of each job (fitted to the
    # profiles it was seeded with and saw) on each (type, count), to set beside the durations.
    import numpy
    believed: dict[str, dict[str, dict[str, float]]] = {}
    for job in cluster.jobs:
        believed[job.name] = {}
        for cname, counts in spec["counts"][job.name].items():
            speedup_fn = job.get_speedup_fn(cname) if job.category != "rigid" else None
            if speedup_fn is None:
                continue
            nodes = numpy.array([-(-n // ngpus[cname]) for n in counts], dtype=numpy.float64)
            goodput = speedup_fn.get_goodput(nodes, numpy.array(counts, dtype=numpy.float64))
            believed[job.name][cname] = {str(n): float(g) for n, g in zip(counts, goodput)}
    jobs = {job.name: {"submit_s": job.submission_time, "start_s": job.start_time,
                       "end_s": job.completion_time, "restarts": job.num_restarts or 0,
                       "rescale_s": job.max_rescale_time,
                       "damping_penalty_s": get_restart_penalty(job.name)}
            for job in cluster.jobs}

    # The true duration of every job on every (type, count) it may take: the job alone, on the
    # placement Sia would give it on empty nodes, from its start to its end, less the restore
    # that Sia charges at the start (the engine of the run above, job.py step).
    durations: dict[str, dict[str, dict[str, float]]] = {}
    for row in spec["jobs"]:
        name = row["name"]
        durations[name] = {}
        for cname, counts in spec["counts"][name].items():
            durations[name][cname] = {}
            for count in counts:
                job = Job(name, cluster.cluster_applications[row["application"]], 0,
                          target_num_replicas=count, target_batch_size=row["batch_size"],
                          category=row["category"])
                job.disable_bsz_tuning()
                job.migrate(cname, sia_placement(count, ngpus[cname]))
                restore_s = job.rescale_time
                while job.completion_time is None:
                    job.step(3600 * 24)
                durations[name][cname][str(count)] = float(job.completion_time - restore_s)
    return {"rounds": rounds, "jobs": jobs, "durations": durations, "believed_goodput": believed,
            "configs": {str(k): list(v) for k, v in policy.idx_to_config_map.items()}}


def _plain(value):
    """numpy scalars (Sia's times and counts) as JSON numbers."""
    return value.item() if hasattr(value, "item") else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sia_dir", help="the artifact's sia-simulator/ directory")
    parser.add_argument("spec_path", help="the case spec (JSON) sia_crosscheck.py wrote")
    parser.add_argument("out_path", help="where to write what Sia did (JSON)")
    args = parser.parse_args()
    sia_dir, spec_path, out_path = args.sia_dir, args.spec_path, args.out_path
    spec = json.loads(Path(spec_path).read_text())
    out_path = str(Path(out_path).resolve())
    chatter = io.StringIO()  # Sia prints every round; its last lines go with an error
    try:
        with contextlib.redirect_stdout(chatter):
            result = run(sia_dir, spec)
    except Exception:
        sys.stderr.write(chatter.getvalue()[-3000:])
        raise
    Path(out_path).write_text(json.dumps(result, default=_plain))


if __name__ == "__main__":
    main()
