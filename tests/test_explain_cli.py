"""`frenzy explain`'s tables from a job record (no cluster): the decision and MARP's options."""
from __future__ import annotations

from rich.console import Console

from frenzy.tools.cli_explain import decision_table, explanation, options_table
from frenzy.v1 import types_pb2

GIB = 1024**3


def option(gpu_type: str, n: int, rank: int) -> types_pb2.PlanOption:
    return types_pb2.PlanOption(gpu_type=gpu_type, num_gpus=n, rank=rank, peak_bytes_per_gpu=20 * GIB,
                                step_time_s=0.25, duration_s=1800,
                                plan=types_pb2.ParallelPlan(dp=n, tp=1, pp=1, micro_batch=2))


def rendered(table) -> str:
    console = Console(record=True, width=220)
    console.print(table)
    return console.export_text()


def placed_job() -> types_pb2.Job:
    a100, v100 = option("A100-80GB", 4, 0), option("V100", 8, 1)
    decision = types_pb2.DecisionRecord(policy="has", chosen=a100, reason="earliest completion",
                                        decision_time_s=0.0021, alternatives=[
        types_pb2.DecisionAlternative(option=a100, estimated_completion_s=1800, verdict="chosen"),
        types_pb2.DecisionAlternative(option=v100, estimated_start_s=600, estimated_completion_s=4200,
                                      verdict="later completion")])
    return types_pb2.Job(id="job-1", state=types_pb2.RUNNING, option=a100, decision=decision)


def test_decision_table_marks_the_choice_and_gives_each_alternatives_verdict():
    text = rendered(decision_table(placed_job()))
    assert "decision by has: earliest completion (2.1 ms)" in text
    chosen_line = next(line for line in text.splitlines() if "→" in line)
    assert "A100-80GB" in chosen_line and "30.0 min" in chosen_line
    assert "later completion" in text and "10.0 min" in text and "1.17 h" in text


def test_no_decision_record_gives_no_table():
    assert decision_table(types_pb2.Job(id="j", state=types_pb2.QUEUED)) is None


def test_options_table_always_shows_the_held_option_even_past_the_limit():
    options = [option("T4", 8, i) for i in range(5)] + [option("A100-80GB", 4, 5)]
    text = rendered(options_table(placed_job(), options, limit=2))
    assert "(6; dry run)" in text
    lines = [line for line in text.splitlines() if "T4" in line or "A100" in line]
    assert len(lines) == 3 and "→" in lines[-1] and "A100-80GB" in lines[-1]


def test_json_record_carries_state_decision_and_options():
    record = explanation(placed_job(), [option("A100-80GB", 4, 0)])
    assert record["state"] == "RUNNING" and record["decision"]["policy"] == "has"
    assert record["options"][0]["num_gpus"] == 4
