"""`frenzy simulate --plot DIR --html FILE`: the figures are written, are PNGs with content, and
the HTML report carries them inline; the plotting core draws every policy on each figure."""
from __future__ import annotations

import base64
import json
import re

from click.testing import CliRunner

from frenzy.tools.cli import cli
from frenzy_scheduler import plots

TRACE = "tests/data/trace_philly_150.csv"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small_cluster(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("node_groups:\n  - {gpu_type: V100-32GB, gpus_per_node: 8, nodes: 1}\n"
                    "  - {gpu_type: T4, gpus_per_node: 2, nodes: 2}\n")
    return str(path)


def test_compare_writes_one_png_per_metric_and_a_self_contained_report(tmp_path) -> None:
    out, report = tmp_path / "plots", tmp_path / "report" / "sim.html"
    result = CliRunner().invoke(cli, ["simulate", "--trace", TRACE, "--cluster", small_cluster(tmp_path),
                                      "--jobs", "25", "--load", "0.9", "--compare", "--json",
                                      "--plot", str(out), "--html", str(report)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the figures do not spoil --json
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.png" for n in plots.FIGURE_NAMES)
    for png in out.iterdir():
        assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 5000, png
    page = report.read_text()
    inlined = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(inlined) == len(plots.FIGURE_NAMES)
    assert all(base64.b64decode(b).startswith(PNG_MAGIC) for b in inlined)
    assert "src=\"http" not in page and "<script" not in page, "the report must stand alone"
    for policy in data["policies"]:
        assert f"<td>{policy}</td>" in page


def test_a_single_policy_run_plots_too(tmp_path) -> None:
    out = tmp_path / "plots"
    result = CliRunner().invoke(cli, ["simulate", "--trace", TRACE, "--cluster", small_cluster(tmp_path),
                                      "--policy", "has", "--jobs", "15", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("*.png"))) == len(plots.FIGURE_NAMES)


def metrics(scale: float) -> dict:
    return {"jct_quantiles_s": [scale * q for q in (60, 600, 3600, 7200)],
            "queue_quantiles_s": [0, 0, scale * 30, scale * 300], "makespan_s": scale * 7200,
            "utilization_over_time_by_type": {"A100-80GB": [[0, 0.5], [3600 * scale, 1.0]],
                                              "T4": [[0, 0.1], [3600 * scale, 0.0]]},
            "gpu_hours_by_type": {"A100-80GB": 10 * scale, "T4": 2 * scale}}


def test_every_policy_is_on_every_figure_and_each_gpu_type_has_a_panel() -> None:
    figures = plots.figures({"fifo": metrics(1.0), "has": metrics(0.5)})
    assert set(figures) == set(plots.FIGURE_NAMES)
    for name in ("jct_cdf", "queue_cdf"):
        (axes,) = figures[name].axes
        assert [line.get_label() for line in axes.get_lines()] == ["fifo", "has"]
        assert axes.get_lines()[0].get_ydata()[-1] == 1.0  # a CDF ends at all jobs
    utilization = figures["utilization"].axes
    assert [a.get_ylabel().split("\n")[0] for a in utilization] == ["A100-80GB", "T4"]
    assert all(len(a.get_lines()) == 2 for a in utilization)
    (bars,) = figures["gpu_hours"].axes
    assert [t.get_text() for t in bars.get_xticklabels()] == ["fifo", "has"]
    assert sorted(round(p.get_height(), 6) for p in bars.patches) == [1.0, 2.0, 5.0, 10.0]
