"""Cross-check of the project's elastic `sia` against Sia's own simulator, on one case both
can express (issue 9, "Faithful baselines"; docs/has.md, "Cross-check against Sia's own
simulator").

Sia's code is not ours and not fetched by this script. Get it once (no install step):

    git clone https://github.com/siasosp23/artifacts /tmp/sia-artifacts    # or any copy
    .venv/bin/pip install cvxpy cylp pandas autograd    # Sia solves with CVXPY's CBC (cylp)
    .venv/bin/python bench/sia_crosscheck.py --sia-dir /tmp/sia-artifacts/sia-simulator

(`pip install -e '.[sia-crosscheck]'` installs the same four.) Without the artifact directory or
those packages the script says what is missing and exits 0 without results.

The case, the same on both sides:
* Sia's own jobs: the first `--jobs` jobs of Sia's `workloads/saturn/workload-1.csv` whose GPU
  count our `sia` can express on both types (1, 2, 4, 8, 16: within one node or whole nodes;
  Sia's rigid jobs may also take 12 GPUs as 8 + 4), at their own arrival times.
* Sia's cluster, less its RTX nodes: 6 `aws` nodes of 4 T4 and 2 `dgx-ext` nodes of 8 A100
  (`simulator_config.py`), with Sia's measured throughput profiles for both.
* `--case rigid` (default): every job is Sia's `rigid` category (fixed batch, fixed GPU count;
  Sia chooses the GPU type, or none, every 60 s round). Sia's policy reads the true throughput
  of each job on each type (`Job.get_throughputs`), so neither side has a prediction error.
  `--case scale-gpus`: Sia's fixed-batch elastic category (1 GPU up to the job's count, Sia's
  configurations), with Sia's throughput model seeded from all its profiles (multi_simulate's
  `--oracle_num_nodes`); Sia's policy then sees its *fitted* goodput model, we see the truth.
* Durations: Sia's engine (`job.py step`) runs each job alone on each (type, count) it may
  take; our `sia` gets those as its option menu, and our engine runs them exactly (no error).
* Restart cost: Sia charges each job its application's `rescale_time` (25-250 s) on every
  allocation, the first one included; our engine does the same here
  (`SimConfig(restart_overhead_s=None, restore_on_first_start=True)`, no other launch cost).
* Rounds of 60 s on both; p = -0.5, lambda_n = 1.1, lambda_a = 0.01 (run_experiment.sh).

Printed and saved (bench/results/sia_crosscheck_<case>.json): average JCT, makespan, restarts,
per-job JCTs, the per-round allocations (GPU type and count of every active job) compared round
by round, first allocations, and (scale-gpus) Sia's goodput model against its engine. Ours runs three times: as shipped; with `lambda_a = 0` (the artifact reads lambda_a but
never adds it to its objective, sia.py `__solve_mip_rescaled`); and with that and goodput^p
not rounded to 2 decimals (`SiaConfig.round_decimals = None`: our `sia` before this
cross-check, which found the rounding, sia.py line 911).
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from frenzy.domain import ParallelPlan, PlanOption
from frenzy_scheduler.core import (PREEMPT, ClusterView, NodeState, Placement, QueuedJob,
                                  RunningJob)
from frenzy_scheduler.policies.sia import SiaConfig, SiaPolicy
from frenzy_scheduler.simulator import SimConfig, SimJob, simulate

ROOT = Path(__file__).resolve().parents[1]
SIA_SIDE = Path(__file__).resolve().parent / "sia_artifact_side.py"
DEFAULT_SIA_DIR = os.environ.get("FRENZY_SIA_ARTIFACT_DIR", "/tmp/sia/sia-simulator")
# Sia's simulated cluster (simulator_config.py cluster_nnodes, less "rtx": 3), with the GPUs
# its profiles were measured on: aws = g4dn.12xlarge (4 T4), dgx-ext = DGX-A100 40GB (8 A100).
CLUSTER_NNODES = {"aws": 6, "dgx-ext": 2}
GPUS_PER_NODE = {"aws": 4, "dgx-ext": 8}
CATALOG_TYPE = {"aws": "T4", "dgx-ext": "A100-40GB"}
SIA_TYPE = {v: k for k, v in CATALOG_TYPE.items()}
# Sia's adaptive configurations (sia.py CONFIGS_4GPU / CONFIGS_8GPU): GPU counts per node size
SIA_CONFIG_GPUS = {4: (1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64),
                   8: (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)}
ROUND_S = 60
P_FAIRNESS, LAMBDA_N, LAMBDA_A = -0.5, 1.1, 0.01
EXPRESSIBLE_GPUS = (1, 2, 4, 8, 16)  # within one node or whole nodes on both types


def missing_prerequisites(sia_dir: Path) -> list[str]:
    """What is needed to run Sia's simulator here and is not present."""
    missing = []
    if not (sia_dir / "sia.py").exists() or not (sia_dir / "traces").is_dir():
        missing.append(f"Sia's simulator at {sia_dir} (git clone "
                       "https://github.com/siasosp23/artifacts; pass --sia-dir .../sia-simulator)")
    for module in ("cvxpy", "pandas", "autograd", "cylp"):
        if importlib.util.find_spec(module) is None:
            missing.append(f"the Python package {module} (pip install cvxpy cylp pandas autograd)")
    return missing


# -- the case -------------------------------------------------------------------------------

def case_jobs(sia_dir: Path, workload: str, count: int, case: str) -> list[dict[str, Any]]:
    """The first `count` jobs of Sia's workload whose GPU count both sides can express."""
    rows = []
    with open(sia_dir / workload, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["num_replicas"]) not in EXPRESSIBLE_GPUS:
                continue
            rows.append({"name": row["name"], "time": float(row["time"]),
                         "application": row["application"],
                         "num_replicas": int(row["num_replicas"]),
                         "batch_size": int(row["batch_size"]), "category": case})
            if len(rows) == count:
                break
    return rows


def job_counts(job: dict[str, Any], case: str) -> dict[str, list[int]]:
    """The GPU counts the job may take on each type: its own (rigid), or Sia's configurations
    up to it (scale-gpus: `max_replicas = target_num_replicas`, cluster.py)."""
    counts = {}
    for cname, per_node in GPUS_PER_NODE.items():
        total = per_node * CLUSTER_NNODES[cname]
        if case == "rigid":
            wanted = [job["num_replicas"]]
        else:
            wanted = [n for n in SIA_CONFIG_GPUS[per_node] if n <= job["num_replicas"]]
        counts[cname] = [n for n in wanted if n <= total]
    return counts


def run_sia_side(sia_dir: Path, spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        done = subprocess.run([sys.executable, str(SIA_SIDE), str(sia_dir), str(spec_path),
                               str(out_path)], capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"Sia's simulator failed:\n{done.stderr[-3000:]}")
        return json.loads(out_path.read_text())


# -- our side -------------------------------------------------------------------------------

def our_cluster() -> ClusterView:
    nodes = {}
    for cname, count in CLUSTER_NNODES.items():
        for i in range(count):
            node_id = f"{cname}-{i}"
            nodes[node_id] = NodeState(node_id, CATALOG_TYPE[cname], GPUS_PER_NODE[cname],
                                       list(range(GPUS_PER_NODE[cname])))
    return ClusterView(nodes)


def our_jobs(rows: Sequence[dict[str, Any]], sia: dict[str, Any]) -> list[SimJob]:
    """Sia's jobs as our simulator's: one option per (type, count), with Sia's engine's true
    duration, a data-parallel plan, and Sia's restore time as the restart cost."""
    jobs = []
    for row in rows:
        name = row["name"]
        options = tuple(
            PlanOption(CATALOG_TYPE[cname], ParallelPlan(dp=int(n)), 0, 0.0, duration_s)
            for cname, by_count in sia["durations"][name].items()
            for n, duration_s in by_count.items())
        jobs.append(SimJob(name, row["time"], options, row["application"], row["num_replicas"],
                           min(o.duration_s for o in options),
                           restart_overhead_s=float(sia["jobs"][name]["rescale_s"])))
    return jobs


@dataclass
class RecordingPolicy:
    """Our `sia`, with the allocation of every active job recorded after every round."""

    inner: SiaPolicy

    def __post_init__(self) -> None:
        self.name, self.round_s, self.elastic = self.inner.name, self.inner.round_s, True
        self.rounds: list[dict[str, Any]] = []

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        actions = self.inner.schedule(queue, cluster, now_s, running)
        alloc = {r.job_id: [SIA_TYPE[r.option.gpu_type], r.num_gpus] for r in running}
        for action in actions:
            if action.kind == PREEMPT:
                alloc.pop(action.job_id, None)
            else:
                alloc[action.job_id] = [SIA_TYPE[action.option.gpu_type], action.option.num_gpus]
        self.rounds.append({"t": now_s, "alloc": alloc})
        return actions


def run_ours(jobs: Sequence[SimJob], config: SiaConfig) -> dict[str, Any]:
    policy = RecordingPolicy(SiaPolicy(config))
    result = simulate(jobs, our_cluster(), policy,
                      config=SimConfig(restart_overhead_s=None, restore_on_first_start=True))
    return {"rounds": policy.rounds, "jobs": {
        r.job_id: {"submit_s": r.submit_time_s, "end_s": r.end_time_s, "restarts": r.restarts}
        for r in result.records}, "stranded": result.stranded}


# -- comparison -----------------------------------------------------------------------------

def summary(jobs: dict[str, dict[str, Any]]) -> dict[str, float]:
    done = [j for j in jobs.values() if j["end_s"] is not None and not math.isnan(j["end_s"])]
    jcts = [j["end_s"] - j["submit_s"] for j in done]
    return {"finished": len(done), "avg_jct_s": statistics.fmean(jcts),
            "p50_jct_s": statistics.median(jcts),
            "makespan_s": max(j["end_s"] for j in done) - min(j["submit_s"] for j in jobs.values()),
            "restarts": sum(j["restarts"] for j in jobs.values())}


def paired_rounds(sia_rounds: list[dict], our_rounds: list[dict], our_ends: dict[str, float]):
    """(time, Sia's allocations, ours) at each of Sia's rounds with an active job, as
    {job: [type, GPUs]}. Our engine calls the policy only while jobs are active, so a round it
    skipped keeps the allocations of the last one, less the jobs that ended since."""
    ours = {r["t"]: r["alloc"] for r in our_rounds}
    last: dict[str, Any] = {}
    for entry in sia_rounds:
        t = entry["t"]
        theirs = {k: v[:2] for k, v in entry["alloc"].items()}
        last = ours.get(t, {k: v for k, v in last.items() if our_ends.get(k, math.inf) > t})
        if theirs or last:
            yield t, theirs, last


def compare_rounds(sia_rounds: list[dict], our_rounds: list[dict], our_ends: dict[str, float],
                   first: int) -> dict[str, Any]:
    """Over the first `first` rounds with an active job: the share of (round, active job) pairs
    where both sides gave the same type and GPU count, the share of rounds with the same GPUs
    in use per type, and the first differences."""
    same = pairs = same_totals = compared = 0
    differences = []
    for t, theirs, ours in paired_rounds(sia_rounds, our_rounds, our_ends):
        compared += 1
        if compared > first:
            compared = first
            break
        same_totals += _gpus_per_type(theirs) == _gpus_per_type(ours)
        for job in sorted(set(theirs) | set(ours)):
            pairs += 1
            if theirs.get(job) == ours.get(job):
                same += 1
            elif len(differences) < 12:
                differences.append({"t": t, "job": job, "sia": theirs.get(job),
                                    "ours": ours.get(job)})
    return {"rounds": compared, "pairs": pairs, "same": same,
            "agreement": same / pairs if pairs else 1.0,
            "same_gpus_per_type": same_totals / compared if compared else 1.0,
            "first_differences": differences}


def differing_rounds_by_job(sia_rounds: list[dict], our_rounds: list[dict],
                            our_ends: dict[str, float]) -> dict[str, int]:
    """For every job, the rounds in which the two sides gave it different allocations."""
    counts: dict[str, int] = {}
    for _, theirs, ours in paired_rounds(sia_rounds, our_rounds, our_ends):
        for job in set(theirs) | set(ours):
            if theirs.get(job) != ours.get(job):
                counts[job] = counts.get(job, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def first_allocations(sia_rounds: list[dict], our_rounds: list[dict]) -> dict[str, Any]:
    """Our first allocation of each job beside Sia's. Sia starts an elastic job whose
    throughput it has not seen on 1 GPU (no goodput model before the job has run: sia.py
    `nnz_speedups`), then moves it; for such a job the allocation it chooses next, once it has
    seen the job run ("informed"), is the one to compare with ours."""
    ours: dict[str, Any] = {}
    for entry in our_rounds:
        for job, alloc in entry["alloc"].items():
            ours.setdefault(job, alloc)
    sia_first: dict[str, Any] = {}
    sia_next: dict[str, Any] = {}
    for entry in sia_rounds:
        for job, alloc in entry["alloc"].items():
            if job not in sia_first:
                sia_first[job] = alloc[:2]
            elif job not in sia_next and alloc[:2] != sia_first[job]:
                sia_next[job] = alloc[:2]
    informed = {job: sia_next.get(job, first) if first[1] == 1 else first
                for job, first in sia_first.items()}
    return {"jobs": len(ours), "sia_starts_on_1_gpu": sum(a[1] == 1 for a in sia_first.values()),
            "same_as_sias_first": sum(ours[j] == sia_first.get(j) for j in ours),
            "same_as_sias_informed": sum(ours[j] == informed.get(j) for j in ours),
            "differ": {j: {"ours": ours[j], "sia_first": sia_first.get(j),
                           "sia_informed": informed.get(j)}
                       for j in ours if ours[j] != informed.get(j)}}


def model_against_engine(sia: dict[str, Any]) -> dict[str, Any]:
    """Sia's goodput model of each elastic job at the end of its run (what its policy believed)
    against its engine's durations (what the job did): each configuration's speed relative to
    the job's slowest, believed over true, and whether both rank the same configuration
    fastest. Ours is given the engine's durations, so this is the information gap."""
    per_job = {}
    for name, believed in sia.get("believed_goodput", {}).items():
        true_s = {(c, n): d for c, by_n in sia["durations"][name].items() for n, d in by_n.items()}
        model = {(c, n): g for c, by_n in believed.items() for n, g in by_n.items()}
        if not model:
            continue
        slowest = max(true_s, key=true_s.get)
        errors = {f"{c} x{n}": (model[(c, n)] / model[slowest]) / (true_s[slowest] / d) - 1.0
                  for (c, n), d in true_s.items() if (c, n) in model}
        best_true, best_model = min(true_s, key=true_s.get), max(model, key=model.get)
        per_job[name] = {"errors": errors, "max_abs_error": max(abs(e) for e in errors.values()),
                         "fastest_true": list(best_true), "fastest_believed": list(best_model)}
    worst = [j["max_abs_error"] for j in per_job.values()]
    return {"jobs": per_job,
            "median_max_abs_error": statistics.median(worst) if worst else None,
            "same_fastest": sum(j["fastest_true"] == j["fastest_believed"]
                                for j in per_job.values()),
            "differ": {n: (j["fastest_true"], j["fastest_believed"]) for n, j in per_job.items()
                       if j["fastest_true"] != j["fastest_believed"]}}


def _gpus_per_type(alloc: dict[str, list]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for gpu_type, gpus in alloc.values():
        totals[gpu_type] = totals.get(gpu_type, 0) + gpus
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sia-dir", default=DEFAULT_SIA_DIR,
                        help="the artifact's sia-simulator directory (FRENZY_SIA_ARTIFACT_DIR)")
    parser.add_argument("--workload", default="workloads/saturn/workload-1.csv")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--case", choices=("rigid", "scale-gpus"), default="rigid")
    parser.add_argument("--rounds", type=int, default=60, help="rounds compared job by job")
    parser.add_argument("--out", help="default: bench/results/sia_crosscheck_<case>.json")
    parser.add_argument("--sia-json", help="keep Sia's raw output here and reuse it while the "
                                           "case is the same (to re-run only our side)")
    args = parser.parse_args(argv)
    args.out = args.out or str(ROOT / f"bench/results/sia_crosscheck_{args.case}.json")
    sia_dir = Path(args.sia_dir).resolve()
    missing = missing_prerequisites(sia_dir)
    if missing:
        print("sia_crosscheck: skipped, missing: " + "; ".join(missing))
        return 0

    rows = case_jobs(sia_dir, args.workload, args.jobs, args.case)
    spec = {"cluster_nnodes": CLUSTER_NNODES, "p": P_FAIRNESS, "lambda_a": LAMBDA_A,
            "lambda_n": LAMBDA_N, "interval_s": ROUND_S, "max_time_s": 30 * 86400,
            "jobs": rows, "counts": {r["name"]: job_counts(r, args.case) for r in rows}}
    if args.case == "scale-gpus":
        spec["oracle_num_nodes"], spec["oracle_num_replicas"] = 16, 64
    tick = time.perf_counter()
    cached = Path(args.sia_json) if args.sia_json else None
    if cached is not None and cached.exists() and json.loads(cached.read_text())["spec"] == spec:
        sia = json.loads(cached.read_text())
    else:
        sia = run_sia_side(sia_dir, spec)
        sia["spec"] = spec
        if cached is not None:
            cached.write_text(json.dumps(sia))
    sia_wall_s = time.perf_counter() - tick
    jobs = our_jobs(rows, sia)
    variants = {"sia (ours, as shipped)": SiaConfig(),
                "sia (ours, lambda_a = 0: the artifact's)": SiaConfig(lambda_a=0.0),
                "sia (ours, lambda_a = 0, not rounded)": SiaConfig(lambda_a=0.0,
                                                                   round_decimals=None)}
    results: dict[str, Any] = {
        "case": {"kind": args.case, "workload": args.workload, "jobs": len(rows),
                 "cluster": {c: f"{n} x {GPUS_PER_NODE[c]} {CATALOG_TYPE[c]}"
                             for c, n in CLUSTER_NNODES.items()},
                 "round_s": ROUND_S, "p": P_FAIRNESS, "lambda_n": LAMBDA_N, "lambda_a": LAMBDA_A},
        "sia_artifact": {"summary": summary(sia["jobs"]), "wall_s": sia_wall_s,
                         "jobs": sia["jobs"]},
        "durations": sia["durations"], "sia_model_against_engine": model_against_engine(sia),
        "ours": {}}
    for label, config in variants.items():
        ours = run_ours(jobs, config)
        ends = {k: j["end_s"] for k, j in ours["jobs"].items()}
        results["ours"][label] = {
            "summary": summary(ours["jobs"]), "stranded": ours["stranded"],
            "rounds": compare_rounds(sia["rounds"], ours["rounds"], ends, args.rounds),
            "rounds_all": compare_rounds(sia["rounds"], ours["rounds"], ends, len(sia["rounds"])),
            "differing_rounds_by_job": differing_rounds_by_job(sia["rounds"], ours["rounds"],
                                                               ends),
            "first_allocations": first_allocations(sia["rounds"], ours["rounds"]),
            "jobs_ending_within_1s": sum(
                abs(j["end_s"] - sia["jobs"][name]["end_s"]) <= 1.0
                for name, j in ours["jobs"].items() if sia["jobs"][name]["end_s"] is not None),
            "jct_ratio_per_job": {
                name: (j["end_s"] - j["submit_s"]) / (sia["jobs"][name]["end_s"] - j["submit_s"])
                for name, j in ours["jobs"].items() if sia["jobs"][name]["end_s"] is not None},
            "jobs": ours["jobs"]}
    Path(args.out).write_text(json.dumps(results, indent=1))
    print_report(results)
    return 0


def print_report(results: dict[str, Any]) -> None:
    case = results["case"]
    print(f"case {case['kind']}: {case['jobs']} jobs of Sia's {case['workload']}, cluster "
          f"{case['cluster']}, {case['round_s']} s rounds")
    base = results["sia_artifact"]["summary"]
    model = results["sia_model_against_engine"]
    if model["jobs"]:
        print(f"Sia's goodput model against its engine, speed relative to the slowest "
              f"configuration: median (over jobs) of the largest error "
              f"{model['median_max_abs_error']:+.0%}; the same fastest configuration for "
              f"{model['same_fastest']}/{len(model['jobs'])} jobs; differ (true, believed): "
              f"{model['differ']}")
    print(f"{'run':42} {'avg JCT h':>9} {'p50 JCT h':>9} {'makespan h':>10} {'restarts':>8} "
          f"{'/Sia avg':>8} {'same ends':>9} {'same allocs':>11} {'same totals':>11}")
    print(f"{'Sia (its simulator)':42} {base['avg_jct_s'] / 3600:9.3f} "
          f"{base['p50_jct_s'] / 3600:9.3f} {base['makespan_s'] / 3600:10.3f} "
          f"{base['restarts']:8d} {'1.000':>8} {'-':>9} {'-':>11} {'-':>11}")
    for label, run in results["ours"].items():
        s, r = run["summary"], run["rounds"]
        print(f"{label:42} {s['avg_jct_s'] / 3600:9.3f} {s['p50_jct_s'] / 3600:9.3f} "
              f"{s['makespan_s'] / 3600:10.3f} {s['restarts']:8d} "
              f"{s['avg_jct_s'] / base['avg_jct_s']:8.3f} "
              f"{run['jobs_ending_within_1s']:>4}/{case['jobs']:<4} {r['agreement']:11.3f} "
              f"{r['same_gpus_per_type']:11.3f}")
        every = run["rounds_all"]
        print(f"    allocations over the first {r['rounds']} rounds above; over all "
              f"{every['rounds']}: same {every['agreement']:.3f}, same totals "
              f"{every['same_gpus_per_type']:.3f}; rounds that differ, by job: "
              f"{run['differing_rounds_by_job']}")
        first = run["first_allocations"]
        print(f"    first allocations: Sia starts {first['sia_starts_on_1_gpu']}/{first['jobs']} "
              f"jobs on 1 GPU; ours equal Sia's first for {first['same_as_sias_first']}, Sia's "
              f"informed one (after a 1-GPU start, its next) for "
              f"{first['same_as_sias_informed']}; differ: {sorted(first['differ'])}")
        for d in r["first_differences"][:4]:
            print(f"    t={d['t']:.0f} {d['job']}: Sia {d['sia']}, ours {d['ours']}")


if __name__ == "__main__":
    sys.exit(main())
