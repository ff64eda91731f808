"""MARP memory accuracy: the analytical model vs the exact CPU profiler, beside three baselines.

    .venv/bin/python bench/marp_accuracy.py [--quick] [--no-cache]

For every config of the grid: profiler peak (ground truth, cached in
bench/results/marp_profile_cache.json), our prediction, and three published formulas:
  frenzy_paper  Frenzy paper (arXiv 2412.14479): 20 B/param / tp + activations
                s*b*h*L*(10 + 24/tp + 5*a*s/(h*tp))
  korthikanti   18 B/param + s*b*h*(34 + 5*a*s/h) per layer (Korthikanti et al. 2022);
                with tp: its sequence-parallel form s*b*h*(34/tp + 5*a*s/(h*tp))
  deepspeed     DeepSpeed ZeRO estimator: 2N + 18N/dp model states (ZeRO-3 style) +
                the same Korthikanti activations
With tp and pp every baseline divides the parameters by tp x pp and keeps L layers of
activations (1F1B: stage 0 holds pp micro-batches of L/pp layers).
The grid's TP/PP configs (PARALLEL_GRID) are profiled on the trainer's ParallelTrainer
(frenzy_predictor.profiler: sequence parallel whenever tp > 1, 1F1B, FSDP2 over dp), the
first and last stage's ranks. Errors are signed: (predicted - measured) / measured, and
summarised per plan kind (dp/zero, tp, pp, tp+pp). Writes bench/results/marp_accuracy.json.
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
from frenzy_predictor.plans import make_plan  # noqa: E402

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
# (model, seq_len, micro_batch, dp, zero, recompute, recipe overrides, tp, pp, grad_accum):
# tensor, pipeline and combined plans as MARP offers them (sequence parallel, ZeRO <= 1 with
# pipelines, at least pp micro-batches per step).
PARALLEL_GRID: list[tuple] = [
    ("tiny-llama", 256, 2, 1, 0, "none", {}, 2, 1, 1),
    ("tiny-gpt2", 256, 2, 1, 0, "none", {}, 2, 1, 2),
    ("tinyllama-1.1b", 2048, 1, 1, 0, "none", {}, 2, 1, 1),
    ("tinyllama-1.1b", 2048, 1, 2, 1, "none", {}, 2, 1, 2),
    ("tinyllama-1.1b", 4096, 1, 4, 3, "full", {}, 2, 1, 1),
    ("llama3.2-1b", 2048, 2, 2, 2, "none", {}, 4, 1, 2),
    ("llama3.2-1b", 1024, 1, 1, 0, "none", {"attention": "eager"}, 2, 1, 1),
    ("tiny-llama", 256, 2, 1, 0, "none", {}, 1, 2, 2),
    ("tiny-gpt2", 256, 2, 1, 0, "full", {}, 1, 2, 4),
    ("tinyllama-1.1b", 2048, 1, 1, 0, "none", {}, 1, 2, 2),
    ("tinyllama-1.1b", 1024, 2, 2, 1, "none", {}, 1, 2, 4),
    ("llama3.2-1b", 2048, 1, 1, 0, "full", {}, 1, 4, 8),
    ("tiny-llama", 256, 2, 2, 1, "none", {}, 2, 2, 4),
    ("tinyllama-1.1b", 1024, 1, 2, 1, "none", {}, 2, 2, 4),
    ("llama3.2-1b", 2048, 1, 1, 0, "none", {"dropout": 0.1}, 2, 2, 2),
    ("llama2-7b", 4096, 1, 1, 1, "full", {}, 4, 2, 8),
    # uneven pipelines: pp does not divide the layers, the trainer's stage_layers gives the
    # first stages one more (4 over 3: 2, 1, 1; 16 over 3: 6, 5, 5)
    ("tiny-llama", 256, 2, 1, 0, "none", {}, 1, 3, 3),
    ("tiny-gpt2", 256, 2, 1, 0, "full", {}, 1, 3, 6),
    ("llama3.2-1b", 2048, 1, 1, 0, "none", {}, 1, 3, 6),
]
QUICK = [0, 2, 3, 16, 21, 23]
QUICK_PARALLEL = [0, 7, 12]


def _full(cfg: tuple) -> tuple:
    """(model, s, b, dp, zero, recompute, overrides, tp, pp, grad_accum) of either grid."""
    return cfg if len(cfg) == 10 else (*cfg, 1, 1, 1)


def plan_kind(cfg: tuple) -> str:
    tp, pp = _full(cfg)[7:9]
    if model_catalog()[cfg[0]].num_layers % pp:
        return "pp uneven" if tp == 1 else "tp+pp uneven"
    return {(False, False): "dp/zero", (True, False): "tp", (False, True): "pp"}.get(
        (tp > 1, pp > 1), "tp+pp")


def key(cfg: tuple) -> str:
    name, s, b, dp, zero, rc, over, tp, pp, accum = _full(cfg)
    extra = ",".join(f"{k}={v}" for k, v in sorted(over.items()))
    parallel = f"|tp{tp}|pp{pp}|ga{accum}" if len(cfg) == 10 else ""  # the DP grid's keys as before
    return f"{name}|s{s}|b{b}|dp{dp}|z{zero}|{rc}|{extra}{parallel}"


def measure(cfg: tuple, cache: dict) -> dict:
    k = key(cfg)
    if k not in cache:
        from frenzy_predictor.profiler import profile_step
        name, s, b, dp, zero, rc, over, tp, pp, accum = _full(cfg)
        p = profile_step(model_catalog()[name], replace(Recipe(), **over), seq_len=s, micro_batch=b,
                         dp=dp, zero=zero, recompute=rc, tp=tp, pp=pp, grad_accum=accum)
        cache[k] = {"peak_tensor_bytes": p.peak_tensor_bytes, "breakdown": p.breakdown,
                    "peak_phase": p.peak_phase, "peak_stage": p.peak_stage,
                    "wall_s": round(p.wall_s, 2)}
        print(f"  profiled {k} in {p.wall_s:.1f} s", file=sys.stderr)
    return cache[k]


def korthikanti_acts(arch, s: int, b: int, tp: int = 1) -> float:
    h, a, L = arch.hidden_size, arch.num_heads, arch.num_layers
    return s * b * h * L * (10 + 24 / tp + 5 * a * s / (h * tp))


def baselines(cfg: tuple) -> dict[str, float]:
    name, s, b, dp, zero, rc, over, tp, pp, _ = _full(cfg)
    arch = model_catalog()[name]
    n = arch.num_params() / (tp * pp)
    h, a, L = arch.hidden_size, arch.num_heads, arch.num_layers
    plain_acts = s * b * h * L * (34 / tp + 5 * a * s / (h * tp))
    return {
        # micro-batch = global / dp: the grid's micro-batch is already the per-rank one.
        "frenzy_paper": 20 * n + korthikanti_acts(arch, s, b, tp),
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
        name, s, b, dp, zero, rc, over, tp, pp, accum = _full(cfg)
        arch = model_catalog()[name]
        plan = make_plan(tp, pp, dp, zero, b, rc)  # as MARP offers it: sequence parallel with tp
        est = estimate_memory(arch, replace(Recipe(), **over), plan, s, grad_accum=accum)
        truth = measured["peak_tensor_bytes"]
        preds = {"ours": est.peak_tensor_bytes, **baselines(cfg)}
        rows.append({"config": key(cfg), "kind": plan_kind(cfg), "measured_bytes": truth,
                     "measured_phase": measured["peak_phase"],
                     "measured_stage": measured.get("peak_stage", 0),
                     "predicted_phase": est.peak_phase, "predicted_stage": est.peak_stage,
                     "predicted": {k: int(v) for k, v in preds.items()},
                     "error_pct": {k: round(100 * (v - truth) / truth, 3) for k, v in preds.items()}})
    summary = _summary(rows)
    by_kind = {kind: _summary([r for r in rows if r["kind"] == kind])
               for kind in ("dp/zero", "tp", "pp", "tp+pp", "pp uneven", "tp+pp uneven")
               if any(r["kind"] == kind for r in rows)}
    return {"configs": len(rows), "summary": summary, "by_kind": by_kind, "rows": rows,
            "estimate_us": round(time_estimate_us(), 2)}


def _summary(rows: list[dict]) -> dict:
    summary = {}
    for method in ("ours", "frenzy_paper", "korthikanti", "deepspeed"):
        errs = [r["error_pct"][method] for r in rows]
        summary[method] = {"configs": len(errs),
                           "mean_abs_pct": round(sum(map(abs, errs)) / len(errs), 3),
                           "max_abs_pct": round(max(map(abs, errs)), 3),
                           "worst_under_pct": round(min(min(errs), 0.0), 3)}
    return summary


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
    grid = [GRID[i] for i in QUICK] + [PARALLEL_GRID[i] for i in QUICK_PARALLEL] if args.quick \
        else GRID + PARALLEL_GRID
    result = run(grid, use_cache=not args.no_cache)
    print(f"{'config':70s} {'measured GiB':>12s} {'ours':>8s} {'paper':>8s} {'korth':>8s} {'dspeed':>8s}")
    for r in result["rows"]:
        e = r["error_pct"]
        print(f"{r['config']:70s} {r['measured_bytes'] / 2**30:12.2f} {e['ours']:+7.2f}% "
              f"{e['frenzy_paper']:+7.1f}% {e['korthikanti']:+7.1f}% {e['deepspeed']:+7.1f}%")
    for title, summary in [(f"all {result['configs']} configs", result["summary"]),
                           *[(f"{kind} ({s['ours']['configs']} configs)", s)
                             for kind, s in result["by_kind"].items()]]:
        print(f"\n{title}; |error| mean / max, worst under-prediction:")
        for method, s in summary.items():
            print(f"  {method:13s} mean {s['mean_abs_pct']:7.2f}%  max {s['max_abs_pct']:8.2f}%  "
                  f"worst under {s['worst_under_pct']:+8.2f}%")
    print(f"estimate_memory: {result['estimate_us']:.1f} us per call")
    out = RESULTS / ("marp_accuracy_quick.json" if args.quick else "marp_accuracy.json")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
