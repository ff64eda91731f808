"""`frenzy explain JOB`: why Frenzy chose this GPU type and plan, or why the job waits.

Two tables, from two sources:
- the scheduler's decision record (Job.decision, from GetJob): the policy, the chosen option and
  why, and each alternative with its estimated start and completion and the verdict on it;
- MARP's ranked options for the job's spec, from the Predict dry run: the same planner core the
  predictor service ran when the job was submitted. The one the job holds is marked. (A job
  re-planned after running out of memory was planned with a memory floor this dry run does not
  apply; the state's reason says when that happened.)
"""
from __future__ import annotations

import json

import click
import grpc
from google.protobuf import json_format
from rich.table import Table

from frenzy.console import table_console
from frenzy.convert import describe_plan
from frenzy.tools.cli_jobs import STATE, _client, _fail_rpc
from frenzy.v1 import types_pb2

GIB = 1024**3


def _same_option(a: types_pb2.PlanOption, b: types_pb2.PlanOption) -> bool:
    return a.gpu_type == b.gpu_type and a.num_gpus == b.num_gpus and a.plan == b.plan


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _option_cells(o: types_pb2.PlanOption) -> list[str]:
    return [o.gpu_type, str(o.num_gpus), describe_plan(o.plan), f"{o.peak_bytes_per_gpu / GIB:.1f}",
            f"{o.step_time_s:.3f}", _duration(o.duration_s), f"{o.num_gpus * o.duration_s / 3600:.2f}"]


def decision_table(job: types_pb2.Job) -> Table | None:
    if not job.HasField("decision"):
        return None
    d = job.decision
    verdict_of_chosen = "chosen" if d.HasField("chosen") else ""
    table = Table("", "GPU type", "GPUs", "plan", "GiB/GPU", "step s", "duration", "GPU-h",
                  "est. start", "est. completion", "verdict",
                  title=f"decision by {d.policy or '?'}: {d.reason or '-'} "
                        f"({d.decision_time_s * 1000:.1f} ms)")
    for a in d.alternatives:
        chosen = d.HasField("chosen") and _same_option(a.option, d.chosen)
        table.add_row("→" if chosen else "", *_option_cells(a.option), _duration(a.estimated_start_s),
                      _duration(a.estimated_completion_s), a.verdict or (verdict_of_chosen if chosen else ""),
                      style="bold" if chosen else None)
    return table


def options_table(job: types_pb2.Job, options: list[types_pb2.PlanOption], limit: int) -> Table:
    table = Table("#", "", "GPU type", "GPUs", "plan", "GiB/GPU", "step s", "duration", "GPU-h",
                  title=f"MARP's options for this spec, best first ({len(options)}; dry run)")
    shown = [o for o in options[:limit]]
    held = [o for o in options[limit:] if job.option.gpu_type and _same_option(o, job.option)]
    for o in shown + held:
        chosen = bool(job.option.gpu_type) and _same_option(o, job.option)
        table.add_row(str(o.rank), "→" if chosen else "", *_option_cells(o), style="bold" if chosen else None)
    return table


def explanation(job: types_pb2.Job, options: list[types_pb2.PlanOption]) -> dict:
    """The `--json` record: the job's state, its decision record and MARP's options."""
    as_dict = lambda m: json_format.MessageToDict(m, preserving_proto_field_name=True)  # noqa: E731
    return {"id": job.id, "name": job.spec.name, "state": STATE(job.state), "reason": job.reason,
            "option": as_dict(job.option) if job.option.gpu_type else None,
            "decision": as_dict(job.decision) if job.HasField("decision") else None,
            "options": [as_dict(o) for o in options]}


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--limit", default=15, show_default=True, type=click.IntRange(min=1),
              help="MARP options shown (the job's own is always shown)")
def explain(job_id: str, as_json: bool, limit: int) -> None:
    """Why Frenzy chose this GPU type and plan for JOB, or why it waits."""
    try:
        with _client() as client:
            explained = client.explain(job_id)
            job, options = explained.job, explained.options
    except grpc.RpcError as err:
        _fail_rpc(err)
    if as_json:
        click.echo(json.dumps(explanation(job, options), indent=2))
        return
    console = table_console()
    held = (f"{job.option.num_gpus}x{job.option.gpu_type} {describe_plan(job.option.plan)}"
            if job.option.gpu_type else "no GPUs yet")
    console.print(f"{job.id} ({job.spec.name or job.spec.model}): {STATE(job.state)}, {held}"
                  + (f"; {job.reason}" if job.reason else ""))
    table = decision_table(job)
    if table is None:
        console.print("no decision record: the job has not been placed yet, or the scheduler "
                      "that placed it keeps none")
    else:
        console.print(table)
    console.print(options_table(job, options, limit))
