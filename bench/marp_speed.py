"""MARP speed: one memory estimate (budget < 50 us) and one job x 10 GPU types (budget < 20 ms).

    .venv/bin/python bench/marp_speed.py [--repeat 7]

Prints both figures per job and writes bench/results/marp_speed.json. Times are the best of
`--repeat` runs of CPU time (time.process_time), so that other load on a shared machine does
not count; wall-clock medians are reported too, and so is the load average before and after
(on a small shared VM, load still inflates CPU time: compare runs made at low load).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from frenzy.catalog.gpus import get_gpu
from frenzy.catalog.models import load_model
from frenzy.domain import ParallelPlan, TrainingSpec
from frenzy_predictor.memory import estimate_memory
from frenzy_predictor.plans import MemoryTable, enumerate_options

TEN_TYPES = ("T4", "V100-32GB", "RTX-4090", "A10", "L40S", "A100-40GB", "A100-80GB",
             "H100-80GB", "H200-141GB", "B200-180GB")
JOBS = (  # model, seq_len, global batch (sequences)
    ("tiny-gpt2", 256, 32),
    ("gpt2", 1024, 512),
    ("llama3.2-1b", 4096, 256),
    ("llama2-7b", 4096, 256),
    ("llama3-8b", 8192, 512),
    ("llama2-13b", 4096, 512),
    ("llama2-70b", 4096, 1024),
)
ESTIMATE_BUDGET_US = 50.0
ENUMERATE_BUDGET_MS = 20.0
RESULTS = Path(__file__).parent / "results" / "marp_speed.json"


def _best_cpu_and_median_wall(fn, repeat: int, number: int = 1) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(number):
            fn()
        cpu.append((time.process_time() - c0) / number)
        wall.append((time.perf_counter() - w0) / number)
    return min(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    types = [get_gpu(name) for name in TEN_TYPES]
    load_before = os.getloadavg()
    rows = []
    print(f"{'job':28s} {'estimate us':>12s} {'enumerate ms':>13s} {'(wall)':>8s} "
          f"{'estimates':>9s} {'options':>7s}")
    for model, seq_len, batch in JOBS:
        arch = load_model(model)
        training = TrainingSpec(seq_len, batch, 10**12)
        plan = ParallelPlan(dp=8, tp=2, pp=2, zero=1, micro_batch=1, sequence_parallel=True)
        estimate_s, _ = _best_cpu_and_median_wall(
            lambda: estimate_memory(arch, training.recipe, plan, seq_len, grad_accum=batch // 8),
            args.repeat, number=500)
        table = MemoryTable(arch, training)
        options = enumerate_options(arch, training, types, memory_table=table)
        enumerate_s, enumerate_wall_s = _best_cpu_and_median_wall(
            lambda: enumerate_options(arch, training, types), args.repeat)
        row = {"model": model, "seq_len": seq_len, "global_batch": batch,
               "estimate_us": estimate_s * 1e6, "enumerate_ms": enumerate_s * 1e3,
               "enumerate_wall_ms": enumerate_wall_s * 1e3, "estimate_calls": table.calls,
               "options": len(options), "gpu_types": len(types)}
        rows.append(row)
        job = f"{model} s={seq_len} B={batch}"
        print(f"{job:28s} {row['estimate_us']:12.1f} {row['enumerate_ms']:13.1f} "
              f"{row['enumerate_wall_ms']:8.1f} {table.calls:9d} {len(options):7d}")
    worst_estimate = max(r["estimate_us"] for r in rows)
    worst_enumerate = max(r["enumerate_ms"] for r in rows)
    load_after = os.getloadavg()
    print(f"worst: {worst_estimate:.1f} us per estimate (budget {ESTIMATE_BUDGET_US:.0f}), "
          f"{worst_enumerate:.1f} ms per job x {len(types)} types (budget "
          f"{ENUMERATE_BUDGET_MS:.0f}); load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after, {os.cpu_count()} CPUs")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": {"python": platform.python_version(), "processor": platform.processor(),
                    "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_1m": {"before": round(load_before[0], 2),
                                        "after": round(load_after[0], 2)}},
        "gpu_types": list(TEN_TYPES), "budgets": {"estimate_us": ESTIMATE_BUDGET_US,
                                                   "enumerate_ms": ENUMERATE_BUDGET_MS},
        "worst": {"estimate_us": worst_estimate, "enumerate_ms": worst_enumerate},
        "jobs": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
