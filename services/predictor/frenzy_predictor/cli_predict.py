"""`frenzy predict`: MARP's plans for a model and batch, or the estimate of one fixed plan.

    frenzy predict --model llama2-7b --seq-len 4096 --global-batch 256 --tokens 1e11
    frenzy predict --model tiny-gpt2 --seq-len 256 --global-batch 8 --gpu-type A100-80GB \\
                   --dp 2 --micro-batch 4 --json

Bad input exits 2 with the offending option named (click.BadParameter). JSON schemas are in
docs/marp-plans.md.
"""
from __future__ import annotations

import json
from typing import Any

import click

from frenzy.catalog.gpus import GpuType, get_gpu, gpu_catalog
from frenzy.catalog.models import ModelArch, load_model
from frenzy.domain import (ATTENTIONS, FRAMEWORKS, GRAD_DTYPES, MAX_SEQ_LEN, OPTIMIZERS, PRECISIONS,
                           RECOMPUTES, Constraints, ParallelPlan, PlanOption, Recipe, TrainingSpec)

DEFAULT_STEPS = 1000
FIXED_PLAN_DEFAULT_GPU = "H100-80GB"  # a fixed plan without --gpu-type(s) is shown on this type

GIB = 1024**3


def _parse_count(value: str | None, option: str) -> int | None:
    """Counts like 1e11 or 2_000_000 are common for tokens; accept any positive integer value."""
    if value is None:
        return None
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number", param_hint=option) from None
    if number <= 0 or number != int(number):
        raise click.BadParameter(f"must be a positive integer, got {value}", param_hint=option)
    return int(number)


def _positive(value: int | None, option: str) -> None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be positive, got {value}", param_hint=option)


def _resolve_model(ref: str) -> ModelArch:
    try:
        arch = load_model(ref)
        arch.validate()
    except ValueError as err:  # names the field: "model: unknown ...", "model_type: ..."
        raise click.BadParameter(str(err), param_hint="--model") from None
    return arch


def _resolve_gpu(name: str, option: str) -> GpuType:
    try:
        return get_gpu(name)
    except KeyError as err:
        raise click.BadParameter(err.args[0], param_hint=option) from None


def _training(arch: ModelArch, seq_len: int, global_batch: int, tokens: str | None,
              steps: str | None, recipe: Recipe) -> TrainingSpec:
    _positive(seq_len, "--seq-len")
    if seq_len > MAX_SEQ_LEN:
        raise click.BadParameter(f"{seq_len} exceeds the sanity bound {MAX_SEQ_LEN}",
                                 param_hint="--seq-len")
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise click.BadParameter(
            f"{seq_len} exceeds {arch.name}'s learned positions ({arch.max_position_embeddings})",
            param_hint="--seq-len")
    _positive(global_batch, "--global-batch")
    if tokens is not None and steps is not None:
        raise click.UsageError("give --tokens or --steps, not both")
    n_tokens, n_steps = _parse_count(tokens, "--tokens"), _parse_count(steps, "--steps")
    try:
        recipe.validate()
    except ValueError as err:  # "training.dropout must be in [0, 1)"
        field = str(err).split(":")[0].split()[0].removeprefix("training.").replace("_", "-")
        raise click.BadParameter(str(err), param_hint=f"--{field}") from None
    total = n_tokens or (n_steps or DEFAULT_STEPS) * seq_len * global_batch
    return TrainingSpec(seq_len, global_batch, total, recipe)


def plan_json(plan: ParallelPlan) -> dict[str, Any]:
    return {"dp": plan.dp, "tp": plan.tp, "pp": plan.pp, "zero": plan.zero,
            "micro_batch": plan.micro_batch, "recompute": plan.recompute,
            "sequence_parallel": plan.sequence_parallel, "cp": plan.cp, "ep": plan.ep}


def option_json(option: PlanOption, rank: int, training: TrainingSpec) -> dict[str, Any]:
    return {"rank": rank, "gpu_type": option.gpu_type, "num_gpus": option.num_gpus,
            "plan": plan_json(option.plan),
            "grad_accum": option.plan.grad_accum(training.global_batch_size),
            "peak_bytes_per_gpu": option.peak_bytes_per_gpu, "memory_margin": option.memory_margin,
            "peak_allocated_bytes": option.peak_allocated_bytes,
            "peak_reserved_bytes": option.peak_reserved_bytes, "step_time_s": option.step_time_s,
            "duration_s": option.duration_s, "gpu_hours": option.gpu_seconds / 3600}


def _console():
    from frenzy.console import table_console

    return table_console()


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _print_options(arch: ModelArch, training: TrainingSpec, options: list[PlanOption]) -> None:
    from rich.table import Table

    table = Table(title=f"{arch.name} ({arch.num_params() / 1e9:.2f}B params), "
                        f"{training.steps} steps of {training.tokens_per_step} tokens, "
                        f"{training.recipe.framework} recipe")
    margins = {o.gpu_type: o.memory_margin for o in options if o.memory_margin > 1.0}
    for column in ("rank", "GPU type", "GPUs", "plan", "grad acc", "peak GiB/GPU", "step",
                   "duration", "GPU-hours"):
        table.add_column(column, justify="left" if column in ("GPU type", "plan") else "right")
    ranked = list(enumerate(options, start=1))
    ranked.sort(key=lambda r: (r[1].gpu_type, r[1].num_gpus))
    previous = None
    for rank, o in ranked:
        if previous is not None and o.gpu_type != previous:
            table.add_section()
        previous = o.gpu_type
        table.add_row(str(rank), o.gpu_type, str(o.num_gpus), o.plan.describe(),
                      str(o.plan.grad_accum(training.global_batch_size)),
                      f"{o.peak_bytes_per_gpu / GIB:.1f}", f"{o.step_time_s:.3g} s",
                      _duration(o.duration_s), f"{o.gpu_seconds / 3600:,.1f}")
    _console().print(table)
    if margins:
        click.echo("peaks include learned memory margins: " + ", ".join(
            f"{t} x{m:.3g}" for t, m in sorted(margins.items())))
    if not options:
        click.echo("no GPU type fits any plan", err=True)


# Megatron's pipeline-split flags: megatron_split keyword -> this CLI's option (the options'
# help names Megatron's own flag)
SPLIT_OPTIONS = {"first_stage_layers": "--first-stage-layers",
                 "last_stage_layers": "--last-stage-layers",
                 "account_for_embedding": "--account-for-embedding",
                 "account_for_loss": "--account-for-loss"}


def _pipeline_split(arch: ModelArch, framework: str, pp: int, split_options: dict[str, Any]):
    """The split Megatron's pipeline-split flags give (pipeline_split.megatron_split), or None
    without them; BadParameter naming the option when the stack or the layers refuse it."""
    given = {k: v for k, v in split_options.items() if v not in (None, False)}
    if not given:
        return None
    option = next(o for k, o in SPLIT_OPTIONS.items() if k in given)
    if framework != "megatron":
        raise click.BadParameter(f"a Megatron pipeline-split option; the {framework} stack "
                                 f"splits by its own rule", param_hint=option)
    from frenzy_predictor.pipeline_split import megatron_split

    try:
        return megatron_split(arch.num_layers, pp, **given)
    except ValueError as err:
        raise click.BadParameter(f"{arch.name} has {arch.num_layers} layers: {err}",
                                 param_hint=option) from None


def _check_fixed_plan(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan,
                      gpu: GpuType, split_given: bool = False) -> None:
    for option, value in (("--dp", plan.dp), ("--tp", plan.tp), ("--pp", plan.pp),
                          ("--micro-batch", plan.micro_batch), ("--cp", plan.cp), ("--ep", plan.ep)):
        _positive(value, option)
    _check_ep(arch, plan.ep, plan.dp)
    if training.seq_len % plan.cp:
        raise click.BadParameter(f"cp {plan.cp} does not divide seq-len {training.seq_len}",
                                 param_hint="--cp")
    if arch.num_heads % plan.tp:
        raise click.BadParameter(f"{arch.name} has {arch.num_heads} heads, not divisible by tp "
                                 f"{plan.tp}", param_hint="--tp")
    if arch.num_kv_heads % plan.tp:
        raise click.BadParameter(f"{arch.name} has {arch.num_kv_heads} kv heads, not divisible "
                                 f"by tp {plan.tp}", param_hint="--tp")
    if plan.tp > gpu.typical_gpus_per_node:
        raise click.BadParameter(f"tp {plan.tp} exceeds the {gpu.typical_gpus_per_node} GPUs of "
                                 f"a {gpu.name} node", param_hint="--tp")
    from frenzy_predictor.memory import recipe_profile

    if not split_given:  # the stack's own split of the layers (Megatron's flags: _pipeline_split)
        try:
            recipe_profile(training.recipe.framework).pipeline_split(arch.num_layers, plan.pp, 1)
        except ValueError as err:
            raise click.BadParameter(f"{arch.name} has {arch.num_layers} layers: "
                                     f"{training.recipe.framework} cannot split them over pp "
                                     f"{plan.pp} ({err})", param_hint="--pp") from None
    if training.global_batch_size % (plan.dp * plan.micro_batch):
        raise click.BadParameter(
            f"global batch {training.global_batch_size} is not a multiple of dp x micro-batch "
            f"= {plan.dp * plan.micro_batch}", param_hint="--micro-batch")


def _check_ep(arch: ModelArch, ep: int, dp: int | None) -> None:
    _positive(ep, "--ep")
    if ep > 1 and not arch.is_moe:
        raise click.BadParameter(f"{arch.name} is not a mixture of experts", param_hint="--ep")
    if ep > 1 and arch.num_experts % ep:
        raise click.BadParameter(f"{arch.name} has {arch.num_experts} experts, not divisible by "
                                 f"ep {ep}", param_hint="--ep")
    if dp is not None and dp % ep:
        raise click.BadParameter(f"ep {ep} must divide dp {dp}", param_hint="--ep")


def _load_margins(source: str | None) -> dict[str, float]:
    """Learned margins as the error recorder serves them (GET /memory-margins/), from a URL or
    a saved JSON file; {} without --margins."""
    if not source:
        return {}
    try:
        if source.startswith(("http://", "https://")):
            import urllib.request

            with urllib.request.urlopen(source, timeout=10) as response:
                data = json.loads(response.read())
        else:
            with open(source) as f:
                data = json.load(f)
    except (OSError, ValueError) as err:
        raise click.BadParameter(f"cannot read learned margins from {source}: {err}",
                                 param_hint="--margins") from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise click.BadParameter("expected a JSON object of margin factors (GET /memory-margins/)",
                                 param_hint="--margins")
    return {str(k): float(v) for k, v in data.items()}


def _margin(margins: dict[str, float], arch: ModelArch, framework: str, gpu_type: str) -> float:
    from frenzy_predictor.error_table import margin_key

    family = f"{arch.family}-moe" if arch.is_moe else arch.family
    return max(1.0, margins.get(margin_key(framework, family, gpu_type), 1.0))


def _evaluate_plan(arch: ModelArch, training: TrainingSpec, plan: ParallelPlan,
                   gpu: GpuType, margin: float = 1.0, pipeline_split=None) -> dict[str, Any]:
    from frenzy_predictor.cost import CostModel
    from frenzy_predictor.memory import estimate_memory
    from frenzy_predictor.plans import usable_bytes

    from frenzy.runnable import runnable_plan

    memory = estimate_memory(arch, training.recipe, plan, training.seq_len,
                             grad_accum=plan.grad_accum(training.global_batch_size),
                             pipeline_split=pipeline_split)
    times = CostModel(arch, training, gpu, plan.ep).breakdown(plan)
    refused = runnable_plan(arch, plan, seq_len=training.seq_len,
                            global_batch=training.global_batch_size,
                            framework=training.recipe.framework)
    step_s = times.total_s
    return {
        "model": arch.name, "num_params": arch.num_params(), "gpu_type": gpu.name,
        "num_gpus": plan.num_gpus, "plan": plan_json(plan),
        "grad_accum": plan.grad_accum(training.global_batch_size),
        "framework": memory.framework,
        "peak_allocated_bytes": memory.peak_allocated_bytes,
        "peak_reserved_bytes": memory.peak_reserved_bytes,
        "device_peak_bytes": memory.device_peak_bytes,
        "peak_tensor_bytes": memory.peak_tensor_bytes, "peak_bytes": memory.peak_bytes,
        "breakdown": dict(memory.breakdown), "capacity_bytes": gpu.memory_bytes,
        # the stack's split of the layers over the pipeline stages, and the stage of the peak
        "stage_layers": list(memory.stage_layers), "peak_stage": memory.peak_stage,
        "usable_bytes": int(usable_bytes(gpu)), "memory_margin": margin,
        "fits": memory.device_peak_bytes * margin <= usable_bytes(gpu),
        # why the framework's launcher would refuse this plan (frenzy.runnable); null: it runs it
        "launcher_refuses": refused,
        "step_time_s": step_s,
        "step_time_breakdown": {"compute_s": times.compute_s,
                                "tensor_parallel_s": times.tensor_parallel_s,
                                "pipeline_s": times.pipeline_s,
                                "data_parallel_s": times.data_parallel_s,
                                "optimizer_s": times.optimizer_s,
                                "context_parallel_s": times.context_parallel_s,
                                "expert_parallel_s": times.expert_parallel_s,
                                "bubble_fraction": times.bubble_fraction},
        "mfu": times.model_flops / (step_s * plan.num_gpus * gpu.peak_tflops_16bit * 1e12),
        "steps": training.steps, "duration_s": step_s * training.steps,
        "gpu_hours": step_s * training.steps * plan.num_gpus / 3600,
    }


def _print_plan(result: dict[str, Any]) -> None:
    from rich.table import Table

    verdict = "[green]fits[/green]" if result["fits"] else "[red]does not fit[/red]"
    if result["launcher_refuses"]:
        verdict += f", [red]the launcher refuses it: {result['launcher_refuses']}[/red]"
    table = Table(title=f"{result['model']} on {result['num_gpus']} x {result['gpu_type']}: "
                        f"{verdict}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for name, value in result["breakdown"].items():
        table.add_row(name, f"{value / GIB:.2f} GiB")
    table.add_row(f"peak allocated ({result['framework']})",
                  f"{result['peak_allocated_bytes'] / GIB:.2f} GiB")
    table.add_row("peak reserved", f"{result['peak_reserved_bytes'] / GIB:.2f} GiB")
    table.add_row("device peak", f"{result['device_peak_bytes'] / GIB:.2f} GiB")
    if len(result["stage_layers"]) > 1:
        table.add_row("layers per stage", " ".join(map(str, result["stage_layers"])))
        table.add_row("peak on stage", str(result["peak_stage"]))
    table.add_row("learned margin", f"x {result['memory_margin']:.3g}")
    table.add_row("usable per GPU", f"{result['usable_bytes'] / GIB:.2f} GiB")
    for name, value in result["step_time_breakdown"].items():
        table.add_row(name, f"{value:.4g}")
    table.add_row("step time", f"{result['step_time_s']:.4g} s")
    table.add_row("MFU", f"{result['mfu']:.1%}")
    table.add_row("duration", _duration(result["duration_s"]))
    _console().print(table)


@click.command("predict")
@click.option("--model", required=True, help="Catalog name or path to a Hugging Face config.json.")
@click.option("--seq-len", type=int, required=True, help="Tokens per sequence.")
@click.option("--global-batch", type=int, required=True, help="Sequences per optimizer step.")
@click.option("--tokens", help="Training tokens (e.g. 1e11).")
@click.option("--steps", help=f"Optimizer steps (default {DEFAULT_STEPS} when --tokens is absent).")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True)
@click.option("--grad-dtype", type=click.Choice(GRAD_DTYPES), default="fp32", show_default=True)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--attention", type=click.Choice(ATTENTIONS), default="flash", show_default=True)
@click.option("--dropout", type=float, default=0.0, show_default=True)
@click.option("--framework", type=click.Choice(FRAMEWORKS), default="frenzy", show_default=True,
              help="Training stack whose recipe to predict (docs/marp-stacks.md).")
@click.option("--gpu-types", default="", help="Comma-separated GPU types to plan for (default: all).")
@click.option("--max-gpus", type=int, default=0, help="GPU count cap (default 512).")
@click.option("--gpu-type", help="Evaluate one fixed plan on this GPU type (with --dp etc.).")
@click.option("--dp", type=int, default=1, show_default=True)
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--pp", type=int, default=1, show_default=True)
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True)
@click.option("--micro-batch", type=int, default=1, show_default=True)
@click.option("--recompute", type=click.Choice(RECOMPUTES), default="none", show_default=True)
@click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism (tp > 1).")
@click.option("--cp", type=int, default=1, show_default=True,
              help="Context parallelism: each sequence split over this many GPUs (fixed plan; "
              "the search tries it for long sequences on stacks that have it).")
@click.option("--ep", type=int, default=1, show_default=True,
              help="Expert parallelism of a mixture-of-experts model (also in the plan search).")
@click.option("--first-stage-layers", type=int, help="Megatron's "
              "--decoder-first-pipeline-num-layers (fixed plan, --framework megatron).")
@click.option("--last-stage-layers", type=int, help="Megatron's "
              "--decoder-last-pipeline-num-layers (fixed plan, --framework megatron).")
@click.option("--account-for-embedding", is_flag=True, help="Megatron's "
              "--account-for-embedding-in-pipeline-split (fixed plan, --framework megatron).")
@click.option("--account-for-loss", is_flag=True, help="Megatron's "
              "--account-for-loss-in-pipeline-split (fixed plan, --framework megatron).")
@click.option("--margins", "margins_from", help="Learned memory margins: the error recorder's "
              "/memory-margins/ URL or a saved copy of it (default: none).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def predict(ctx: click.Context, model: str, seq_len: int, global_batch: int, tokens: str | None,
            steps: str | None, precision: str, grad_dtype: str, optimizer: str, attention: str,
            dropout: float, framework: str, gpu_types: str, max_gpus: int, gpu_type: str | None, dp: int, tp: int,
            pp: int, zero: int, micro_batch: int, recompute: str, sequence_parallel: bool,
            cp: int, ep: int, first_stage_layers: int | None, last_stage_layers: int | None,
            account_for_embedding: bool, account_for_loss: bool, margins_from: str | None,
            as_json: bool) -> None:
    """Predict per-GPU memory and speed of parallel plans; list the best per GPU type."""
    arch = _resolve_model(model)
    recipe = Recipe(precision, grad_dtype, optimizer, attention, dropout, framework)
    training = _training(arch, seq_len, global_batch, tokens, steps, recipe)
    margins = _load_margins(margins_from)
    split_options = {"first_stage_layers": first_stage_layers,
                     "last_stage_layers": last_stage_layers,
                     "account_for_embedding": account_for_embedding,
                     "account_for_loss": account_for_loss}
    plan_flags = [name for name in ("dp", "tp", "pp", "zero", "micro_batch", "recompute",
                                    "sequence_parallel", "cp", *split_options)
                  if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]

    fixed = {"dp", "tp", "pp"} <= set(plan_flags)  # all of dp/tp/pp: that plan, not a search
    if gpu_type is None and fixed:
        names = [n.strip() for n in gpu_types.split(",") if n.strip()]
        gpu_type = names[0] if names else FIXED_PLAN_DEFAULT_GPU
    if gpu_type is not None:
        gpu = _resolve_gpu(gpu_type, "--gpu-type")
        plan = ParallelPlan(dp, tp, pp, zero, micro_batch, recompute, sequence_parallel, cp, ep)
        split = _pipeline_split(arch, framework, plan.pp, split_options)
        _check_fixed_plan(arch, training, plan, gpu, split is not None)
        result = _evaluate_plan(arch, training, plan, gpu, _margin(margins, arch, framework, gpu.name),
                                split)
        click.echo(json.dumps(result, indent=2)) if as_json else _print_plan(result)
        return
    if plan_flags:
        raise click.UsageError(f"--{plan_flags[0].replace('_', '-')} needs a fixed plan: "
                               "--gpu-type, or all of --dp, --tp and --pp")

    from frenzy_predictor.plans import MAX_GPUS, enumerate_options

    catalog = gpu_catalog()
    names = [n.strip() for n in gpu_types.split(",") if n.strip()]
    types = [_resolve_gpu(n, "--gpu-types") for n in names] if names else list(catalog.values())
    if max_gpus < 0:
        raise click.BadParameter(f"must be positive, got {max_gpus}", param_hint="--max-gpus")
    _check_ep(arch, ep, None)
    options = enumerate_options(arch, training, types, Constraints(max_gpus=max_gpus),
                                max_gpus=max_gpus or MAX_GPUS, ep=ep,
                                memory_margins={t.name: _margin(margins, arch, framework, t.name)
                                                for t in types})
    if as_json:
        click.echo(json.dumps([option_json(o, rank, training)
                               for rank, o in enumerate(options, start=1)], indent=2))
    else:
        _print_options(arch, training, options)
