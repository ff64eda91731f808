"""`frenzy simulate`: replay a job trace on a cluster file under one policy, or all of them.

The JSON schema is documented in docs/simulator.md. Progress goes to stderr, so `--json`
stdout stays machine-readable.
"""
from __future__ import annotations

import json
import math
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from frenzy.clusterfile import NodeGroup, load_cluster_file
from frenzy.console import table_console
from frenzy.domain import SCHEDULER_REDECIDE_S
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies import BASELINES, policy_names
from frenzy_scheduler.simulator import SimConfig, offered_load, prepare_jobs, run_policy
from frenzy_scheduler.simulator.trace import load_trace, parse_start
from frenzy_scheduler.simulator.workload import DEFAULT_REFERENCE_GPU, SimJob

PROGRESS_MIN_JOBS = 1000  # "long trace": show a progress bar from this many jobs

REQUIRED_KEYS = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
                 "utilization", "unschedulable", "decision_p50_s", "decision_p99_s")


def _load_inputs(trace: str, cluster: str, num_jobs: int, start: str, load: float, seed: int,
                 reference_gpu: str) -> tuple[list[NodeGroup], list[SimJob], float]:
    try:
        groups = load_cluster_file(cluster)
    except (ValueError, KeyError) as err:
        raise click.BadParameter(str(err), param_hint="--cluster") from None
    if not Path(trace).is_file():
        raise click.BadParameter(f"trace file {trace!r} does not exist", param_hint="--trace")
    try:
        trace_jobs = load_trace(trace)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--trace") from None
    try:
        origin = None
        if not _is_number(start):
            from frenzy_scheduler.simulator.trace import trace_origin_s
            origin = trace_origin_s(trace)
        start_s = parse_start(start, origin)
    except ValueError as err:
        raise click.BadParameter(f"{start!r}: {err}", param_hint="--start") from None
    try:
        jobs = prepare_jobs(trace_jobs, groups, start_s=start_s, count=num_jobs, load=load,
                            seed=seed, reference_gpu=reference_gpu)
    except (ValueError, KeyError) as err:
        raise click.BadParameter(str(err), param_hint="--trace") from None
    if not jobs:
        raise click.BadParameter(f"no jobs at or after start {start!r}", param_hint="--start")
    return groups, jobs, start_s


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each policy's figures over the best baseline's (lowest avg JCT among the baselines)."""
    baselines = {k: v for k, v in results.items() if k in BASELINES}
    if not baselines:
        return {}
    best = min(baselines, key=lambda k: baselines[k]["avg_jct_s"])

    def ratio(a: float, b: float) -> float:
        return a / b if b else math.nan

    return {"best_baseline": best, "per_policy": {
        name: {"avg_jct": ratio(m["avg_jct_s"], results[best]["avg_jct_s"]),
               "p99_jct": ratio(m["p99_jct_s"], results[best]["p99_jct_s"]),
               "makespan": ratio(m["makespan_s"], results[best]["makespan_s"]),
               "decision_p99": ratio(m["decision_p99_s"], results[best]["decision_p99_s"])}
        for name, m in results.items()}}


def _table(results: dict[str, dict[str, Any]], ratios: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for column in ("policy", "avg JCT h", "p50 JCT h", "p99 JCT h", "avg queue h", "makespan h",
                   "util", "unsched", "dec p50 ms", "dec p99 ms", "avg JCT ratio",
                   "p99 JCT ratio"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, m in results.items():
        r = ratios.get("per_policy", {}).get(name, {})
        table.add_row(name, f"{m['avg_jct_s'] / 3600:.2f}", f"{m['p50_jct_s'] / 3600:.2f}",
                      f"{m['p99_jct_s'] / 3600:.1f}", f"{m['avg_queue_s'] / 3600:.2f}",
                      f"{m['makespan_s'] / 3600:.1f}", f"{m['utilization']:.3f}",
                      str(m["unschedulable"]), f"{m['decision_p50_s'] * 1e3:.3f}",
                      f"{m['decision_p99_s'] * 1e3:.3f}", f"{r.get('avg_jct', math.nan):.3f}",
                      f"{r.get('p99_jct', math.nan):.3f}")
    return table


def _write_figures(results: dict[str, dict[str, Any]], plot_dir: str | None, html_file: str | None,
                   title: str, err_console: Console) -> None:
    """The shell around frenzy_scheduler.plots: PNG files and the HTML report (paths on stderr)."""
    from frenzy_scheduler import plots  # matplotlib loads only when figures are asked for

    pngs = {name: plots.png_bytes(figure) for name, figure in plots.figures(results).items()}
    if plot_dir:
        directory = Path(plot_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in pngs.items():
            (directory / f"{name}.png").write_bytes(data)
        err_console.print(f"figures: {', '.join(str(directory / f'{n}.png') for n in pngs)}", soft_wrap=True)
    if html_file:
        Path(html_file).parent.mkdir(parents=True, exist_ok=True)
        Path(html_file).write_text(plots.html_report(pngs, results, title))
        err_console.print(f"report: {html_file}", soft_wrap=True)


@click.command("simulate")
@click.option("--trace", required=True, help="Philly CSV or generic CSV (see docs/simulator.md).")
@click.option("--cluster", required=True, help="Node-group YAML, or an Alibaba node-list CSV.")
@click.option("--policy", default="has", show_default=True,
              help=f"One of: {', '.join(policy_names())}.")
@click.option("--jobs", "num_jobs", type=int, default=0, show_default=True,
              help="Simulate the first N jobs at/after --start (0: all).")
@click.option("--start", default="0", show_default=True,
              help="Seconds after the trace's first job, or an ISO date-time.")
@click.option("--load", type=float, default=0.0, show_default=True,
              help="Rescale inter-arrival times to this offered load (0: keep the trace's).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the trace-job -> model mapping.")
@click.option("--launch-overhead-s", type=float, default=60.0, show_default=True,
              help="Seconds per job start on one node, x (1 + log2(nodes spanned)).")
@click.option("--restart-overhead-s", type=float, default=None,
              help="Seconds per resume (resize, migration, preemption, node failure); "
                   "default: per model size, 25-250 s as Sia measured.")
@click.option("--duration-error-sigma", type=float, default=0.3, show_default=True,
              help="Per-job lognormal error of predicted durations (same errors for every policy).")
@click.option("--reshape-guard-s", type=float, default=0.0, show_default=True,
              help="The live system's reshape guard for every policy: a job moved less than "
                   "this long ago is not reshaped (0: none, as Sia's own simulator; has keeps "
                   "the orchestrator's 600 s itself).")
@click.option("--redecide-s", type=float, default=SCHEDULER_REDECIDE_S, show_default=True,
              help="While jobs wait, an event-driven policy is asked again this long after its "
                   "last decision, as the live scheduler asks it (FRENZY_SCHEDULER_REDECIDE_S; "
                   "0: on events only).")
@click.option("--reference-gpu", default=DEFAULT_REFERENCE_GPU, show_default=True,
              help="GPU type the trace durations were measured on.")
@click.option("--compare", is_flag=True, help="Run every policy on the same input.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False), default=None,
              help="Write PNGs here: JCT and queueing-delay CDFs, utilisation over time per GPU "
                   "type, GPU-hours (every policy on each with --compare).")
@click.option("--html", "html_file", type=click.Path(dir_okay=False), default=None,
              help="Write one self-contained HTML report (summary table, figures inlined).")
@click.option("--progress/--no-progress", default=None,
              help=f"Progress bar on stderr (default: on from {PROGRESS_MIN_JOBS} jobs).")
def simulate(trace: str, cluster: str, policy: str, num_jobs: int, start: str, load: float,
             seed: int, launch_overhead_s: float, restart_overhead_s: float | None,
             duration_error_sigma: float, reshape_guard_s: float, redecide_s: float,
             reference_gpu: str,
             compare: bool, as_json: bool,
             plot_dir: str | None, html_file: str | None, progress: bool | None) -> None:
    """Replay a job trace on a cluster under a scheduling policy and print JCT and overhead."""
    if num_jobs < 0:
        raise click.BadParameter(f"must be >= 0, got {num_jobs}", param_hint="--jobs")
    for hint, value in (("--load", load), ("--launch-overhead-s", launch_overhead_s),
                        ("--restart-overhead-s", restart_overhead_s or 0.0),
                        ("--duration-error-sigma", duration_error_sigma),
                        ("--reshape-guard-s", reshape_guard_s), ("--redecide-s", redecide_s)):
        if value < 0 or math.isnan(value):
            raise click.BadParameter(f"must be >= 0, got {value}", param_hint=hint)
    config = replace(SimConfig.realistic(launch_overhead_s, restart_overhead_s,
                                         duration_error_sigma, seed),
                     reshape_guard_s=reshape_guard_s, redecide_s=redecide_s)
    if not compare and policy not in policy_names():
        raise click.BadParameter(f"unknown policy {policy!r}; known: {', '.join(policy_names())}",
                                 param_hint="--policy")
    try:
        from frenzy.catalog.gpus import get_gpu
        get_gpu(reference_gpu)
    except KeyError as err:
        raise click.BadParameter(str(err.args[0]), param_hint="--reference-gpu") from None
    groups, jobs, start_s = _load_inputs(trace, cluster, num_jobs, start, load, seed,
                                         reference_gpu)
    capacity = build_cluster(groups).total_by_type()
    names = policy_names() if compare else [policy]
    show = progress if progress is not None else len(jobs) >= PROGRESS_MIN_JOBS
    err_console = Console(stderr=True)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=err_console, transient=True)
    results: dict[str, dict[str, Any]] = {}
    with bar if show else nullcontext():
        for name in names:
            on_progress: Callable[[int], None] | None = None
            if show:
                task = bar.add_task(name, total=len(jobs))
                on_progress = lambda done, task=task: bar.update(task, completed=done)  # noqa: E731
            results[name] = run_policy(name, jobs, groups, on_progress=on_progress, config=config)
    inputs = {"trace": trace, "cluster": cluster, "jobs": len(jobs), "start_s": start_s,
              "load": load, "offered_load": offered_load(jobs, capacity), "seed": seed,
              "reference_gpu": reference_gpu, "gpus": sum(capacity.values()),
              "launch_overhead_s": launch_overhead_s, "restart_overhead_s": restart_overhead_s,
              "duration_error_sigma": duration_error_sigma, "reshape_guard_s": reshape_guard_s,
              "redecide_s": redecide_s,
              "gpus_by_type": capacity}
    if plot_dir or html_file:
        _write_figures(results, plot_dir, html_file,
                       f"{Path(trace).name} on {Path(cluster).name}, {len(jobs)} jobs", err_console)
    if compare:
        ratios = _ratios(results)
        if as_json:
            click.echo(json.dumps({"input": inputs, "policies": results, "ratios": ratios},
                                  indent=2))
        else:
            table_console().print(_table(results, ratios, f"{Path(trace).name} on {Path(cluster).name}, "
                                                    f"{len(jobs)} jobs, offered load "
                                                    f"{inputs['offered_load']:.2f}"))
            if ratios:
                table_console().print(f"ratios are against the best baseline: {ratios['best_baseline']}")
        return
    metrics = dict(results[policy], input=inputs)
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
    else:
        table_console().print(_table(results, {}, f"{policy}: {len(jobs)} jobs"))
