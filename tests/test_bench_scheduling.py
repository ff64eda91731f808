"""bench/scheduling.py's per-event harness measures what it says: each timed decision follows
exactly one event on the state the earlier events and answers left, every policy meets the
same events, and an answer is executed with the same checks as the simulator's."""
from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

from frenzy_scheduler.core import RESIZE, Placement
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/data/trace_philly_150.csv"


def load_scheduling():
    spec = importlib.util.spec_from_file_location("scheduling", ROOT / "bench/scheduling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["scheduling"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Recording(HasPolicy):
    """has, noting what each call was given: the queued ids, the running ids, the free GPUs."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[tuple[frozenset, frozenset, int, float]] = []

    def schedule(self, queue, cluster, now_s, running=()):
        self.inputs.append((frozenset(j.job_id for j in queue),
                            frozenset(r.job_id for r in running),
                            sum(n.num_free for n in cluster.nodes.values()), now_s))
        return super().schedule(queue, cluster, now_s, running)


@pytest.fixture(scope="module")
def bench():
    return load_scheduling()


@pytest.fixture(scope="module")
def point(bench):
    trace = load_trace(TRACE)
    queue, cluster, running = bench.sweep_inputs(trace, 100, 10, random.Random(0))
    return trace, queue, cluster, running


def test_each_timed_call_follows_one_event_on_the_state_left_before(bench, point) -> None:
    trace, queue, cluster, running = point
    free_before = [n.num_free for n in cluster.nodes.values()]
    events, top_up = bench.draw_events(trace, queue, running, bench.sweep_groups(100),
                                       random.Random(1), 3 * len(queue), count=12)
    assert {e.ends for e in events if e.ends} <= {r.job_id for r in running}
    assert any(e.ends for e in events) and any(e.arrives for e in events)
    policy = Recording()
    timing = bench.time_events(policy, bench.EventState.of(queue, cluster, running), events,
                               top_up, budget_s=1e9)
    assert timing["samples"] == len(events) == len(timing["events"])
    assert [n.num_free for n in cluster.nodes.values()] == free_before  # the input untouched
    timed = policy.inputs[timing["fill_calls"]:]
    assert len(timed) == len(events)
    for (queued_before, running_before, _, _), (queued, running_now, _, now_s), event in zip(
            policy.inputs[timing["fill_calls"] - 1:], timed, events):
        assert now_s == event.time_s
        if event.arrives is not None:
            assert event.arrives.job_id in queued and event.arrives.job_id not in queued_before
        else:
            assert event.ends not in queued | running_now
            assert event.ends in queued_before | running_before
    # the state moves on: no two timed calls saw the same queue and running jobs
    assert len({(q, r) for q, r, _, _ in timed}) == len(timed)


def test_has_and_sia_meet_the_same_events(bench, point) -> None:
    trace, queue, cluster, running = point
    result = bench.event_point(trace, queue, cluster, running, ["has", "sia"],
                               bench.sweep_groups(100), random.Random(2), budget_s=0.0, count=8)
    has, sia = result["policies"]["has"], result["policies"]["sia"]
    assert has["samples"] == sia["samples"] == bench.SWEEP_MIN_SAMPLES
    assert has["events"] == sia["events"]
    assert result["sia_over_has"]["cpu_p50"] > 0
    # drawn from the point's rng alone: the same again, in full
    drawn = [bench.draw_events(trace, queue, running, bench.sweep_groups(100),
                               random.Random(3), 3 * len(queue))[0] for _ in range(2)]
    assert [e.label for e in drawn[0]] == [e.label for e in drawn[1]]
    assert sum(1 for e in drawn[0] if e.ends) >= 5


def test_an_answer_is_executed_with_the_simulators_checks(bench, point) -> None:
    _, queue, cluster, running = point
    state = bench.EventState.of(queue, cluster, running)
    busy = running[0]
    with pytest.raises(ValueError, match="not free"):
        state.apply([Placement(queue[0].job_id, queue[0].options[0], busy.assignments)], 0.0)


def test_a_reshaped_job_keeps_its_submit_time_and_counts_a_restart(bench, point) -> None:
    _, queue, cluster, running = point
    state = bench.EventState.of(queue, cluster, running)
    job = running[0]
    (node_id, gpus), = job.assignments
    state.apply([Placement(job.job_id, job.option, ((node_id, gpus[:1]),), RESIZE)], 100.0)
    resized = state.running[job.job_id]
    assert resized.assignments == ((node_id, gpus[:1]),) and resized.start_time_s == 100.0
    assert (resized.submit_time_s, resized.restarts) == (job.submit_time_s, job.restarts + 1)
    assert resized.fraction_at_start == max(bench.MIN_LEFT, job.remaining_fraction(100.0))
    assert state.free_gpus() == sum(n.num_free for n in cluster.nodes.values()) + len(gpus) - 1


def test_has_idle_splits_idle_gpu_time_by_whether_a_job_was_waiting(monkeypatch) -> None:
    """bench/has_idle.py on a case worked by hand: 4 GPUs; job a runs on 2 from 0 to 10 s;
    job b arrives at 5 s, waits, runs on 2 from 8 to 20 s. Idle while b waited (5-8 s): 2 GPUs
    x 3 s; with none waiting: 2 x 5 s before b arrives and 2 x 10 s after a ends."""
    from frenzy_scheduler.simulator.engine import JobRecord, SimResult
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # it imports has_windows as the bench does
    has_idle = importlib.import_module("has_idle")
    result = SimResult("p", [JobRecord("a", 0.0, 0.0, 0.0, 10.0), JobRecord("b", 5.0, 8.0, 8.0, 20.0)],
                       [], [], [], {"X": 44.0}, {"X": 4},
                       segments_by_type={"X": [(0.0, 10.0, 2), (8.0, 20.0, 2)]})
    assert has_idle.idle_gpu_s(result, "X") == (6.0, 30.0)


def test_has_prefix_merges_runs_and_divides_by_the_saved_sia(monkeypatch, tmp_path) -> None:
    """bench/has_prefix.py on the first 40 jobs of the test trace: has and sia run, has / sia is
    each figure's ratio; a later run of has alone keeps the saved sia run and divides by it."""
    import json
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    has_prefix = importlib.import_module("has_prefix")
    monkeypatch.setattr(has_prefix, "PHILLY", TRACE)
    out = tmp_path / "prefix.json"

    def main(*argv: str) -> dict:
        monkeypatch.setattr(sys, "argv", ["has_prefix.py", "--jobs", "40", "--out", str(out),
                                          *argv])
        has_prefix.main()
        return json.loads(out.read_text())["40 jobs"]["seed 0"]

    runs = main("--policies", "has,sia")
    assert runs["has"]["completed"] == runs["sia"]["completed"] == 40
    assert runs["has / sia"]["avg_jct_s"] == pytest.approx(
        runs["has"]["avg_jct_s"] / runs["sia"]["avg_jct_s"])
    sia = runs["sia"]
    runs = main("--policies", "has")
    assert runs["sia"] == sia  # kept, not run again
    assert runs["has / sia"]["p99_jct_s"] == pytest.approx(
        runs["has"]["p99_jct_s"] / sia["p99_jct_s"])


def load_report():
    spec = importlib.util.spec_from_file_location("scheduling_report",
                                                  ROOT / "bench/scheduling_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_tables_are_the_saved_results() -> None:
    """docs/has.md's result blocks are what bench/scheduling_report.py renders from the
    committed JSON: a re-run whose figures were not written into the docs fails here."""
    report = load_report()
    text = report.DOC.read_text()
    names = {m["name"] for m in report.BLOCK_RE.finditer(text)}
    assert names == set(report.BLOCKS), "every block is in the docs, once at least"
    assert report.rendered(text) == text, \
        "docs/has.md is behind bench/results: run .venv/bin/python bench/scheduling_report.py --write"


def test_report_marks_goals_met_by_threshold_and_refuses_unknown_blocks() -> None:
    report = load_report()
    assert report._met([0.80, 0.86], 0.85) == "1 of 2"
    assert report._met([0.80, 0.85], 0.85) == "yes"
    assert report._met([0.90], 0.85) == "no"
    assert report._ratio_row("x", [0.849, 0.851], 0.85) == "| x | **0.849** | 0.851 | 1 of 2 |"
    with pytest.raises(KeyError, match="unknown report block 'nope'"):
        report.rendered("<!-- report:nope -->\n<!-- /report:nope -->")
    stale = "<!-- report:goals -->\nold figures\n<!-- /report:goals -->"
    assert "old figures" not in report.rendered(stale)


def test_uncertainty_intervals_cover_the_mean_and_collapse_without_spread() -> None:
    """The goals' bootstrap intervals over windows: windows that all agree give a point; the
    interval holds the mean it is around; the statistics are the goals table's (the mean of
    per-window ratios for avg JCT, the ratio of window means per seed for p99)."""
    report = load_report()
    same = [[(2.0, 4.0), (3.0, 6.0)]] * 5  # 5 windows x 2 seeds, every ratio 0.5
    assert report.mean_ratio(same) == 0.5
    assert report.bootstrap_interval(same, report.mean_ratio) == (0.5, 0.5)
    spread = [[(1.0, 1.0)], [(2.0, 1.0)], [(1.0, 2.0)], [(3.0, 3.0)], [(1.5, 1.0)]]
    low, high = report.bootstrap_interval(spread, report.mean_ratio)
    assert low < report.mean_ratio(spread) < high
    assert report.mean_ratio_of_means(spread) == (1 + 2 + 1 + 3 + 1.5) / (1 + 1 + 2 + 3 + 1)
    seeds = report.load("has_seeds.json")
    rows = report._per_window(seeds, "frenzy-288/trace", "avg_jct_s")
    assert report.mean_ratio(rows) == pytest.approx(
        seeds["summary"]["frenzy-288/trace"]["sia"]["avg_jct_mean"])
