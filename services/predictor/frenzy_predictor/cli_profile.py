"""`frenzy profile`: exact per-rank peak tensor memory of the reference step, on CPU (fake tensors)."""
from __future__ import annotations

import json

import click

from frenzy.domain import ATTENTIONS, GRAD_DTYPES, OPTIMIZERS, PRECISIONS, RECOMPUTES


@click.command("profile")
@click.option("--model", "model_ref", required=True, help="catalog name or path to a HF config.json")
@click.option("--seq-len", type=int, required=True)
@click.option("--micro-batch", type=int, default=1, show_default=True)
@click.option("--dp", type=int, default=1, show_default=True, help="data-parallel ranks (fake process group)")
@click.option("--tp", type=int, default=1, show_default=True,
              help="tensor-parallel ranks (sequence parallel, as MARP plans it)")
@click.option("--pp", type=int, default=1, show_default=True,
              help="pipeline stages (1F1B; needs --grad-accum >= --pp)")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True)
@click.option("--grad-accum", type=int, default=1, show_default=True, help="micro-batches per step")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True)
@click.option("--grad-dtype", type=click.Choice(GRAD_DTYPES), default="fp32", show_default=True)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--attention", type=click.Choice(ATTENTIONS), default="flash", show_default=True)
@click.option("--dropout", type=float, default=0.0, show_default=True)
@click.option("--recompute", type=click.Choice(RECOMPUTES), default="none", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def profile(model_ref, seq_len, micro_batch, dp, tp, pp, zero, grad_accum, precision, grad_dtype,
            optimizer, attention, dropout, recompute, as_json) -> None:
    """Measure one rank's peak tensor memory of two training iterations, without a GPU."""
    from frenzy.catalog.models import load_model
    from frenzy.domain import Recipe

    for name, value in (("seq-len", seq_len), ("micro-batch", micro_batch), ("dp", dp),
                        ("tp", tp), ("pp", pp), ("grad-accum", grad_accum)):
        if value <= 0:
            raise click.BadParameter(f"must be positive, got {value}", param_hint=f"--{name}")
    try:
        arch = load_model(model_ref)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--model") from None
    recipe = Recipe(precision, grad_dtype, optimizer, attention, dropout)
    try:
        recipe.validate()
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise click.UsageError("frenzy profile needs PyTorch: pip install 'frenzy[torch]'") from None
    from frenzy_predictor.memory import estimate_memory
    from frenzy_predictor.plans import make_plan
    from frenzy_predictor.profiler import profile_step

    try:
        result = profile_step(arch, recipe, seq_len=seq_len, micro_batch=micro_batch, dp=dp, zero=zero,
                              recompute=recompute, grad_accum=grad_accum, tp=tp, pp=pp)
        predicted = estimate_memory(arch, recipe, make_plan(tp, pp, dp, zero, micro_batch, recompute),
                                    seq_len, grad_accum=grad_accum)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    out = {"peak_tensor_bytes": result.peak_tensor_bytes, "breakdown": result.breakdown,
           "peak_phase": result.peak_phase, "peak_stage": result.peak_stage,
           "first_iteration_peak_bytes": result.first_iteration_peak_bytes,
           "predicted_peak_tensor_bytes": predicted.peak_tensor_bytes,
           "prediction_error_pct": round(100 * (predicted.peak_tensor_bytes - result.peak_tensor_bytes)
                                         / result.peak_tensor_bytes, 3),
           "wall_s": round(result.wall_s, 2), "config": result.config}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    gib = 2**30
    click.echo(f"{arch.name}: peak {result.peak_tensor_bytes / gib:.3f} GiB per rank "
               f"(MARP predicts {predicted.peak_tensor_bytes / gib:.3f} GiB, "
               f"{out['prediction_error_pct']:+.2f}%), peak in {result.peak_phase}"
               + (f" on pipeline stage {result.peak_stage}" if pp > 1 else ""))
    for key, value in result.breakdown.items():
        click.echo(f"  {key:22s} {value / gib:10.3f} GiB")
