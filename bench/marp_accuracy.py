"""MARP memory accuracy: the analytical model vs the exact CPU profiler, beside three baselines.

    .venv/bin/python bench/marp_accuracy.py [--quick] [--no-cache]

For every config of the grid: profiler peak (ground truth, cached in
bench/results/marp_profile_cache.json), our prediction, and three published formulas:
  frenzy_paper  Frenzy paper (arXiv 2412.14479): 20 B/param / tp + activations
                s*b*h*L*(10 + 24/tp + 5*a*s/(h*tp))
  korthikanti   18 B/param + s*b*h*(34 + 5*a*s/h) per layer (Korthikanti et al. 2022)
  deepspeed     DeepSpeed ZeRO estimator: 2N + 18N/dp model states (ZeRO-3 style) +
                the same Korthikanti activations
Errors are signed: (predicted - measured) / measured. Writes bench/results/marp_accuracy.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("", "services/predictor", "services/node-agent"):
    sys.path.insert(0, str(ROOT / sub))

from frenzy.catalog.models import model_catalog  # noqa: E402
from frenzy.domain import ParallelPlan, Recipe  # noqa: E402
from frenzy_predictor.memory import estimate_memory  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CACHE = RESULTS / "marp_profile_cache.json"

# (model, seq_len, micro_batch, dp, zero, recompute, recipe overrides)
GRID: list[tuple] = [
    ("gpt2", 512, 8, 1, 0, "none", {}),
    ("gpt2", 1024, 4, 1, 0, "none", {"attention": "eager"}),
    ("gpt2", 1024, 2, 4, 1, "none", {"dropout": 0.1}),
    ("gpt2", 1024, 8, 8, 3, "full", {}),
    ("gpt2", 1024, 1, 2, 2, "none", {"attention": "eager", "dropout": 0.1}),
    ("gpt2-medium", 1024, 4, 1, 0, "none", {}),
    ("gpt2-medium", 1024, 8, 4, 2, "full", {"attention": "eager"}),
    ("gpt2-medium", 512, 2, 8, 3, "none", {}),
    ("gpt2-medium", 1024, 2, 2, 1, "selective", {"attention": "eager"}),
    ("gpt2-large", 1024, 2, 1, 0, "none", {"attention": "eager"}),
    ("gpt2-large", 1024, 4, 8, 3, "full", {}),
    ("gpt2-large", 512, 4, 4, 1, "none", {"grad_dtype": "16bit"}),
    ("gpt2-xl", 1024, 1, 1, 0, "none", {}),
    ("gpt2-xl", 1024, 2, 8, 2, "none", {}),
    ("gpt2-xl", 1024, 4, 4, 3, "full", {"attention": "eager"}),
    ("gpt2-xl", 512, 8, 2, 1, "full", {"optimizer": "sgd"}),
    ("tinyllama-1.1b", 2048, 1, 1, 0, "none", {}),
    ("tinyllama-1.1b", 2048, 4, 8, 3, "full", {}),
    ("tinyllama-1.1b", 1024, 2, 4, 2, "none", {"attention": "eager"}),
    ("tinyllama-1.1b", 4096, 1, 2, 1, "none", {}),
    ("tinyllama-1.1b", 8192, 1, 8, 3, "full", {}),
    ("llama3.2-1b", 2048, 1, 1, 0, "none", {}),
    ("llama3.2-1b", 4096, 2, 8, 3, "full", {}),
    ("llama3.2-1b", 1024, 4, 4, 1, "none", {"attention": "eager"}),
    ("llama3.2-1b", 8192, 1, 8, 2, "full", {}),
    ("llama3.2-1b", 512, 8, 2, 3, "none", {"precision": "fp32"}),
    ("llama3.2-1b", 512, 1, 8, 3, "none", {}),
    ("llama2-7b", 4096, 1, 1, 0, "none", {}),
    ("llama2-7b", 4096, 1, 8, 3, "none", {}),
    ("llama2-7b", 2048, 4, 8, 3, "full", {}),
    ("llama2-7b", 8192, 1, 8, 1, "full", {}),
    ("llama2-7b", 1024, 2, 4, 2, "none", {"attention": "eager"}),
    ("llama2-7b", 4096, 2, 8, 2, "full", {"grad_dtype": "16bit"}),
    ("mistral-7b", 4096, 1, 8, 3, "none", {}),
    ("mistral-7b", 8192, 1, 8, 3, "full", {}),
    ("mistral-7b", 2048, 2, 4, 1, "selective", {"attention": "eager"}),
    ("llama3-8b", 4096, 1, 8, 3, "none", {}),
    ("llama3-8b", 8192, 2, 8, 3, "full", {}),
    ("llama3-8b", 2048, 1, 8, 2, "none", {"attention": "eager"}),
    ("llama2-13b", 4096, 1, 8, 3, "full", {}),
    ("llama2-13b", 2048, 2, 8, 3, "none", {}),
    ("llama2-13b", 4096, 1, 8, 1, "full", {}),
    ("llama2-13b", 1024, 1, 1, 0, "none", {"attention": "eager"}),
]
QUICK = [0, 2, 3, 16, 21, 23]


def key(cfg: tuple) -> str:
    name, s, b, dp, zero, rc, over = cfg
    extra = ",".join(f"{k}={v}" for k, v in sorted(over.items()))
    return f"{name}|s{s}|b{b}|dp{dp}|z{zero}|{rc}|{extra}"


def measure(cfg: tuple, cache: dict) -> dict:
    k = key(cfg)
    if k not in cache:
        from frenzy_predictor.profiler import profile_step
        name, s, b, dp, zero, rc, over = cfg
        p = profile_step(model_catalog()[name], replace(Recipe(), **over), seq_len=s, micro_batch=b,
                         dp=dp, zero=zero, recompute=rc)
        cache[k] = {"peak_tensor_bytes": p.peak_tensor_bytes, "breakdown": p.breakdown,
                    "peak_phase": p.peak_phase, "wall_s": round(p.wall_s, 2)}
        print(f"  profiled {k} in {p.wall_s:.1f} s", file=sys.stderr)
    return cache[k]


def korthikanti_acts(arch, s: int, b: int, tp: int = 1) -> float:
    h, a, L = arch.hidden_size, arch.num_heads, arch.num_layers
    return s * b * h * L * (10 + 24 / tp + 5 * a * s / (h * tp))


def baselines(cfg: tuple) -> dict[str, float]:
    name, s, b, dp, zero, rc, over = cfg
    arch = model_catalog()[name]
    n = arch.num_params()
    h, a, L = arch.hidden_size, arch.num_heads, arch.num_layers
    plain_acts = s * b * h * L * (34 + 5 * a * s / h)
    return {
        # micro-batch = global / dp: the grid's micro-batch is already the per-rank one.
        "frenzy_paper": 20 * n + korthikanti_acts(arch, s, b),
        "korthikanti": 18 * n + plain_acts,
        "deepspeed": 2 * n + 18 * n / dp + plain_acts,
    }


def run(grid: list[tuple], use_cache: bool = True) -> dict:
    RESULTS.mkdir(parents=True, exist_ok=True)
    cache = json.loads(CACHE.read_text()) if use_cache and CACHE.exists() else {}
    rows = []
    for cfg in grid:
        measured = measure(cfg, cache)
        CACHE.write_text(json.dumps(cache, indent=1, sort_keys=True))
        name, s, b, dp, zero, rc, over = cfg
        arch = model_catalog()[name]
        plan = ParallelPlan(dp=dp, zero=zero, micro_batch=b, recompute=rc)
        est = estimate_memory(arch, replace(Recipe(), **over), plan, s, grad_accum=1)
        truth = measured["peak_tensor_bytes"]
        preds = {"ours": est.peak_tensor_bytes, **baselines(cfg)}
        rows.append({"config": key(cfg), "measured_bytes": truth, "measured_phase": measured["peak_phase"],
                     "predicted_phase": est.peak_phase,
                     "predicted": {k: int(v) for k, v in preds.items()},
                     "error_pct": {k: round(100 * (v - truth) / truth, 3) for k, v in preds.items()}})
    summary = {}
    for method in ("ours", "frenzy_paper", "korthikanti", "deepspeed"):
        errs = [r["error_pct"][method] for r in rows]
        summary[method] = {"mean_abs_pct": round(sum(map(abs, errs)) / len(errs), 3),
                           "max_abs_pct": round(max(map(abs, errs)), 3),
                           "worst_under_pct": round(min(min(errs), 0.0), 3)}
    return {"configs": len(rows), "summary": summary, "rows": rows,
            "estimate_us": round(time_estimate_us(), 2)}


def time_estimate_us(repeats: int = 2000) -> float:
    arch, recipe = model_catalog()["llama2-7b"], Recipe()
    plan = ParallelPlan(dp=8, tp=2, pp=2, zero=1, micro_batch=2, recompute="full")
    t0 = time.perf_counter()
    for _ in range(repeats):
        estimate_memory(arch, recipe, plan, 4096)
    return (time.perf_counter() - t0) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 6-config subset")
    parser.add_argument("--no-cache", action="store_true", help="re-profile every config")
    args = parser.parse_args()
    grid = [GRID[i] for i in QUICK] if args.quick else GRID
    result = run(grid, use_cache=not args.no_cache)
    print(f"{'config':58s} {'measured GiB':>12s} {'ours':>8s} {'paper':>8s} {'korth':>8s} {'dspeed':>8s}")
    for r in result["rows"]:
        e = r["error_pct"]
        print(f"{r['config']:58s} {r['measured_bytes'] / 2**30:12.2f} {e['ours']:+7.2f}% "
              f"{e['frenzy_paper']:+7.1f}% {e['korthikanti']:+7.1f}% {e['deepspeed']:+7.1f}%")
    print(f"\n{result['configs']} configs; |error| mean / max, worst under-prediction:")
    for method, s in result["summary"].items():
        print(f"  {method:13s} mean {s['mean_abs_pct']:7.2f}%  max {s['max_abs_pct']:8.2f}%  "
              f"worst under {s['worst_under_pct']:+8.2f}%")
    print(f"estimate_memory: {result['estimate_us']:.1f} us per call")
    out = RESULTS / ("marp_accuracy_quick.json" if args.quick else "marp_accuracy.json")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
