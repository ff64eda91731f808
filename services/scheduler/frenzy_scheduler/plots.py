"""Figures of simulation results: `frenzy simulate --plot DIR` and `--html FILE`.

Pure: the simulator's summary metrics (docs/simulator.md) in, matplotlib `Figure`s and bytes out;
the CLI writes the files. One figure per metric with every simulated policy on it, so `--compare`
puts all policies side by side and a single run draws the one:
  jct_cdf         the CDF of job completion times (log time axis: traces are long-tailed)
  queue_cdf       the CDF of queueing delay (submit to first start)
  utilization     busy / all GPUs over time, one panel per GPU type
  gpu_hours       GPU-hours held per GPU type, overheads included

Figures are built on `matplotlib.figure.Figure` with the Agg canvas, not pyplot, so nothing
global is touched (no open-figure registry, no display backend).
"""
from __future__ import annotations

import base64
import html
import io
from typing import Any, Mapping

from matplotlib.figure import Figure

HOUR_S = 3600.0
DPI = 110
FIGURE_NAMES = ("jct_cdf", "queue_cdf", "utilization", "gpu_hours")
TITLES = {"jct_cdf": "Job completion time (CDF)", "queue_cdf": "Queueing delay (CDF)",
          "utilization": "GPU utilisation over time, per GPU type",
          "gpu_hours": "GPU-hours held, per GPU type"}

# Policies often tie (fifo and a greedy policy on a light load): a dash pattern per policy keeps a
# line drawn under another one visible.
LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
# Makespans this far apart: the time axis turns logarithmic past the shortest one, so a policy
# that drains a long tail does not squeeze the others into a spike at zero.
SPAN_RATIO_FOR_LOG = 10.0

Results = Mapping[str, Mapping[str, Any]]  # policy -> the simulator's summary metrics


def _style(index: int) -> dict[str, Any]:
    return {"linestyle": LINESTYLES[index % len(LINESTYLES)], "linewidth": 1.6}


def _cdf_figure(results: Results, key: str, xlabel: str, title: str) -> Figure:
    figure = Figure(figsize=(7, 4.2), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    for index, (policy, metrics) in enumerate(results.items()):
        values_h = [v / HOUR_S for v in metrics.get(key, [])]
        if not values_h:
            continue
        fractions = [i / (len(values_h) - 1) if len(values_h) > 1 else 1.0 for i in range(len(values_h))]
        axes.plot(values_h, fractions, label=policy, drawstyle="steps-post", **_style(index))
    positive = [v for m in results.values() for v in m.get(key, []) if v > 0]
    if positive and max(positive) / min(positive) > 100:
        axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction of completed jobs")
    axes.set_ylim(0, 1.02)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    return figure


def utilization_figure(results: Results) -> Figure:
    gpu_types = sorted({t for m in results.values() for t in m.get("utilization_over_time_by_type", {})})
    panels = max(1, len(gpu_types))
    figure = Figure(figsize=(7, 1.2 + 2.0 * panels), dpi=DPI, layout="constrained")
    axes_list = figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    spans_h = [m["makespan_s"] / HOUR_S for m in results.values() if m.get("makespan_s", 0) > 0]
    for axes, gpu_type in zip(axes_list, gpu_types):
        for index, (policy, metrics) in enumerate(results.items()):
            series = metrics.get("utilization_over_time_by_type", {}).get(gpu_type, [])
            if series:
                start_s = series[0][0]
                axes.plot([(t - start_s) / HOUR_S for t, _ in series], [u for _, u in series],
                          label=policy, drawstyle="steps-post", **_style(index))
        if spans_h and max(spans_h) > SPAN_RATIO_FOR_LOG * min(spans_h):
            axes.set_xscale("symlog", linthresh=min(spans_h))
        axes.set_ylabel(f"{gpu_type}\nbusy fraction")
        axes.set_ylim(0, 1.05)
        axes.grid(True, alpha=0.3)
    axes_list[0].set_title(TITLES["utilization"])
    axes_list[0].legend(loc="upper right", fontsize="small")
    axes_list[-1].set_xlabel("hours since the first arrival")
    return figure


def gpu_hours_figure(results: Results) -> Figure:
    policies = list(results)
    gpu_types = sorted({t for m in results.values() for t in m.get("gpu_hours_by_type", {})})
    figure = Figure(figsize=(max(5.0, 1.1 * len(policies) + 3), 4.2), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    bottoms = [0.0] * len(policies)
    for gpu_type in gpu_types:
        heights = [results[p].get("gpu_hours_by_type", {}).get(gpu_type, 0.0) for p in policies]
        axes.bar(policies, heights, bottom=bottoms, label=gpu_type)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for x, total in enumerate(bottoms):
        axes.annotate(f"{total:,.0f}", (x, total), ha="center", va="bottom", fontsize="small")
    axes.set_ylabel("GPU-hours")
    axes.set_title(TITLES["gpu_hours"])
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize="small")
    if len(policies) > 4:
        axes.tick_params(axis="x", labelrotation=30)
    return figure


def figures(results: Results) -> dict[str, Figure]:
    """One figure per metric, every policy in `results` on each."""
    return {"jct_cdf": _cdf_figure(results, "jct_quantiles_s", "job completion time (hours)",
                                   TITLES["jct_cdf"]),
            "queue_cdf": _cdf_figure(results, "queue_quantiles_s", "queueing delay (hours)",
                                     TITLES["queue_cdf"]),
            "utilization": utilization_figure(results),
            "gpu_hours": gpu_hours_figure(results)}


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def html_report(pngs: Mapping[str, bytes], results: Results, title: str) -> str:
    """One self-contained page: a summary table and every figure inlined as a data: URI."""
    rows = "".join(
        f"<tr><td>{html.escape(p)}</td><td>{m.get('avg_jct_s', 0) / HOUR_S:.2f}</td>"
        f"<td>{m.get('p99_jct_s', 0) / HOUR_S:.1f}</td><td>{m.get('avg_queue_s', 0) / HOUR_S:.2f}</td>"
        f"<td>{m.get('makespan_s', 0) / HOUR_S:.1f}</td><td>{m.get('utilization', 0):.3f}</td>"
        f"<td>{m.get('gpu_hours', 0):,.0f}</td><td>{m.get('unschedulable', 0)}</td></tr>"
        for p, m in results.items())
    images = "".join(
        f'<figure><img alt="{html.escape(TITLES.get(name, name))}" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode()}"></figure>'
        for name, data in pngs.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:60rem;margin:2rem auto}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2rem .6rem;text-align:right}}
td:first-child{{text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>{html.escape(title)}</h1>
<table><tr><th>policy</th><th>avg JCT h</th><th>p99 JCT h</th><th>avg queue h</th>
<th>makespan h</th><th>util</th><th>GPU-hours</th><th>unschedulable</th></tr>{rows}</table>
{images}
</body></html>
"""
